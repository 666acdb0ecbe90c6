"""Capability detection and the skip reasons (docs/cuda-runtime.md §2.2, §9; mooncake-verbs §4.3).

The no-driver tests talk to the real cuda-bindings, which returns 35 from every call on a
machine without ``libcuda.so``; on a machine with a driver they skip, saying so.
"""

from __future__ import annotations

import dataclasses
import importlib.util

import pytest

from kvreg.fakes.cuda.fake_cuda import FakeCuda
from kvreg.fakes.cuda.profile import DeviceProfile
from kvreg.fakes.verbs import Fabric
from kvreg.realhw.capabilities import Capabilities, NicInfo, detect, detect_nics, profile_for

runtime = pytest.importorskip("cuda.bindings.runtime", reason="cuda-bindings is not installed")
_COUNT_CODE = int(runtime.cudaGetDeviceCount()[0])
no_driver = pytest.mark.skipif(_COUNT_CODE != 35, reason="this machine has an NVIDIA driver "
                               f"(cudaGetDeviceCount returned {_COUNT_CODE}, not 35)")
HAS_PYVERBS = importlib.util.find_spec("pyverbs") is not None


@no_driver
def test_real_bindings_return_35_without_a_driver() -> None:
    # docs/cuda-runtime.md §2.2 / §9 [OBS-local]: every call 35, count slot None; versions still
    # answer
    err, count = runtime.cudaGetDeviceCount()
    assert (int(err), count) == (35, None)
    assert int(runtime.cudaHostRegister(0x1000, 4096, 0)[0]) == 35
    assert int(runtime.cudaGetLastError()[0]) == 35
    err, version = runtime.cudaDriverGetVersion()
    assert (int(err), version) == (0, 0)
    err, version = runtime.cudaRuntimeGetVersion()
    assert int(err) == 0 and version >= 12000


@no_driver
def test_detect_reports_the_no_driver_path_with_code_35() -> None:
    caps = detect(rdma=False)
    assert caps.device_count_code == 35 and caps.device_count == 0
    assert caps.driver_version == 0 and caps.driver_text() == "none"
    assert caps.cuda_bindings is not None and caps.bindings_major is not None
    reason = caps.missing_reason("gpu")
    assert reason is not None and "no NVIDIA driver" in reason and "35" in reason
    assert caps.can_use_host_pointer_for_registered_mem is None   # not asked without a GPU
    assert caps.host_memory_available > 0


def test_no_gpu_and_stub_library_reasons_name_their_codes() -> None:
    caps = detect(FakeCuda("no-gpu").runtime, rdma=False, torch=False)
    assert caps.device_count_code == 100
    assert "100 cudaErrorNoDevice" in (caps.missing_reason("gpu") or "")
    stub = detect(FakeCuda(DeviceProfile(env="stub")).runtime, rdma=False, torch=False)
    assert "34 cudaErrorStubLibrary" in (stub.missing_reason("gpu") or "")
    assert "not installed" in (Capabilities().missing_reason("gpu") or "")


def test_a_usable_stand_in_reads_the_attributes_the_profile_mirrors() -> None:
    profile = DeviceProfile().replace(can_use_host_pointer_for_registered_mem=False,
                                      read_only_supported=True, driver_version=12090)
    caps = detect(FakeCuda(profile).runtime, rdma=False, torch=False)
    assert caps.missing_reason("gpu") is None
    assert (caps.can_use_host_pointer_for_registered_mem, caps.host_register_supported,
            caps.read_only_supported) == (0, 1, 1)
    assert caps.driver_version == 12090 and caps.device_memory == profile.total_memory
    derived = profile_for(caps)
    assert derived.can_use_host_pointer_for_registered_mem is False
    assert derived.read_only_supported is True
    # [INF] a pre-CUDA-13 driver is pre-R580: no 512 GiB ceiling assumed
    assert derived.per_call_limit is None
    # the [UNC] switches stay at their documented defaults
    assert derived.copy_across_registrations == DeviceProfile().copy_across_registrations


def test_profile_for_maps_environment_codes() -> None:
    caps = detect(FakeCuda("no-gpu").runtime, rdma=False, torch=False)
    assert profile_for(caps).env == "no_gpu"


def test_rdma_reasons_from_fake_pyverbs() -> None:
    fabric = Fabric(devices={"rxe0": "rxe"})
    ok, error, nics = detect_nics(fabric.node().modules)
    assert ok and error is None
    assert nics == (NicInfo("rxe0", (1 << 64) - 1, 0x1000, 4, 2, 0xFFFFFF),)
    caps = Capabilities(pyverbs=True, nics=nics)
    assert caps.missing_reason("rdma") is None and caps.active_nic == nics[0]

    empty = Fabric()
    assert Capabilities(pyverbs=True, nics=detect_nics(empty.node().modules)[2]
                        ).missing_reason("rdma") == "no RDMA device (get_device_list() is empty)"

    nic = fabric.devices()[0]
    nic.ports[0] = dataclasses.replace(nic.ports[0], state=1)   # IBV_PORT_DOWN
    down = Capabilities(pyverbs=True, nics=detect_nics(fabric.node().modules)[2])
    assert down.missing_reason("rdma") == "no RDMA device with an ACTIVE port 1 (rxe0)"

    fabric.node().rdma_stack = False
    ok, error, nics = detect_nics(fabric.node().modules)
    assert ok and nics == () and error is not None and "PyverbsRDMAError" in error
    assert (Capabilities(pyverbs=True, rdma_error=error).missing_reason("rdma") or ""
            ).startswith("no RDMA device (PyverbsRDMAError")


@pytest.mark.skipif(HAS_PYVERBS, reason="pyverbs is importable here")
def test_detect_says_pyverbs_is_not_importable() -> None:
    caps = detect(torch=False)
    assert caps.pyverbs is False
    assert caps.missing_reason("rdma") == ("pyverbs is not importable (install Debian's "
                                           "python3-pyverbs)")


def test_capabilities_round_trip_through_a_dict() -> None:
    fabric = Fabric(devices={"mlx5_0": "mlx5"})
    caps = detect(FakeCuda().runtime, verbs_modules=fabric.node().modules, torch=False)
    again = Capabilities.from_dict(caps.to_dict())
    assert again == caps
    assert "no GPU" in again.describe() or again.device_name in again.describe()


@no_driver
def test_the_probes_call_the_real_bindings_with_valid_arguments() -> None:
    # every probe against the real cuda-bindings: with no driver each call answers 35, so
    # a probe may stop at a setup step (cudaMalloc) but must never pass an argument the
    # real binding rejects (TypeError, OverflowError)
    from kvreg.realhw.backend import RealCuda
    from kvreg.realhw.probes import all_probes, run_probe
    from kvreg.realhw.probes_cuda import CudaProbeContext

    real = RealCuda()
    for probe in all_probes("cuda"):
        out = run_probe(probe, CudaProbeContext(real))
        if out.status == "error":
            assert out.reason.startswith("ProbeError: ") and "returned 35" in out.reason
        else:
            codes = [v for v in out.observation.values() if isinstance(v, int)]
            assert set(codes) <= {35}, (probe.name, out.observation)
    assert real.leak_report() == ""
    stream = real.runtime
    assert int(stream.cudaMemcpyAsync(1, 2, 3, stream.cudaMemcpyKind(1), 0)[0]) == 35
