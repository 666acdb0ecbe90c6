"""Environment modes: no driver (35), no GPU (100), stub library (34) (docs/cuda-runtime.md §2.2,
§9, §11.4)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kvreg.fakes.cuda.fake_cuda import FakeCuda
from kvreg.fakes.cuda.profile import DeviceProfile

MODES = [("no-driver", 35), ("no-gpu", 100), (DeviceProfile(name="stub", env="stub"), 34)]
MODE_IDS = ["no-driver", "no-gpu", "stub"]


def _calls(fake: FakeCuda) -> dict[str, tuple[Callable[[], Any], int]]:
    """api -> (call, number of output slots) for the cuda-python face."""
    rt = fake.runtime
    base = fake.virtual(1 << 20).data_ptr()
    attrs = rt.cudaMemcpyAttributes()
    attrs.srcAccessOrder = 1
    return {
        "cudaHostRegister": (lambda: rt.cudaHostRegister(base, 4096, 0), 0),
        "cudaHostUnregister": (lambda: rt.cudaHostUnregister(base), 0),
        "cudaPointerGetAttributes": (lambda: rt.cudaPointerGetAttributes(base), 1),
        "cudaHostGetDevicePointer": (lambda: rt.cudaHostGetDevicePointer(base, 0), 1),
        "cudaHostGetFlags": (lambda: rt.cudaHostGetFlags(base), 1),
        "cudaHostAlloc": (lambda: rt.cudaHostAlloc(4096, 0), 1),
        "cudaMallocHost": (lambda: rt.cudaMallocHost(4096), 1),
        "cudaFreeHost": (lambda: rt.cudaFreeHost(base), 0),
        "cudaMalloc": (lambda: rt.cudaMalloc(4096), 1),
        "cudaFree": (lambda: rt.cudaFree(base), 0),
        "cudaGetDeviceCount": (rt.cudaGetDeviceCount, 1),
        "cudaGetDevice": (rt.cudaGetDevice, 1),
        "cudaSetDevice": (lambda: rt.cudaSetDevice(0), 0),
        "cudaDeviceGetAttribute": (lambda: rt.cudaDeviceGetAttribute(91, 0), 1),
        "cudaMemGetInfo": (rt.cudaMemGetInfo, 2),
        "cudaStreamCreate": (rt.cudaStreamCreate, 1),
        "cudaStreamSynchronize": (lambda: rt.cudaStreamSynchronize(2), 0),
        "cudaDeviceSynchronize": (rt.cudaDeviceSynchronize, 0),
        "cudaMemcpyAsync": (lambda: rt.cudaMemcpyAsync(base, base + 8192, 4096, 0, 2), 0),
        "cudaMemcpyBatchAsync": (
            lambda: rt.cudaMemcpyBatchAsync([base], [base + 8192], [4096], 1, [attrs], [0], 1,
                                            2), 0),
        "cudaGetLastError": (rt.cudaGetLastError, 0),
        "cudaPeekAtLastError": (rt.cudaPeekAtLastError, 0),
    }


@pytest.mark.parametrize(("profile", "code"), MODES, ids=MODE_IDS)
def test_every_call_returns_the_init_error(profile: Any, code: int) -> None:
    # docs/cuda-runtime.md §2.2 "No NVIDIA driver installed: 35 ... from cudaHostRegister,
    # cudaHostUnregister, cudaPointerGetAttributes, cudaGetDeviceCount and cudaGetLastError"
    # [OBS-local]; "Driver present, no GPU visible" -> 100 [DOC]; "libcuda.so resolves to the
    # toolkit stub" -> 34 [DOC]; §11.4; §9 "On error the output slots are None" [OBS-local]
    fake = FakeCuda(profile)
    for api, (call, n_out) in _calls(fake).items():
        res = call()
        assert isinstance(res, tuple), api
        assert int(res[0]) == code, api
        assert res[0] == fake.runtime.cudaError_t(code), api
        assert list(res[1:]) == [None] * n_out, api
    assert fake.live_registrations() == []


@pytest.mark.parametrize(("profile", "code"), MODES, ids=MODE_IDS)
def test_init_error_persists_through_get_last_error(profile: Any, code: int) -> None:
    # docs/cuda-runtime.md §11.5 "Init failures persist"; §6 "[OBS-local] With no driver, the
    # init failure (35) is returned by every call, cudaGetLastError included"
    fake = FakeCuda(profile)
    for _ in range(3):
        assert int(fake.runtime.cudaGetLastError()[0]) == code
    assert fake.torch_runtime.peek_at_last_error() == code


def test_no_driver_device_count_is_35_none() -> None:
    # docs/cuda-runtime.md §9 "cudaGetDeviceCount() gives (35, None) with no driver, not
    # (35, 0)" [OBS-local]
    fake = FakeCuda("no-driver")
    err, count = fake.runtime.cudaGetDeviceCount()
    assert int(err) == 35 and count is None


def test_no_driver_versions() -> None:
    # docs/cuda-runtime.md §2.2 "cudaRuntimeGetVersion succeeds ... cudaDriverGetVersion
    # succeeds with value 0" [OBS-local]; §9 "(0, 0)"; §6/§9: cuda-bindings links its own
    # static runtime and reports its own version: 13050 for cuda-bindings 13.5.0 [OBS-local]
    fake = FakeCuda("no-driver")
    err, version = fake.runtime.cudaRuntimeGetVersion()
    assert int(err) == 0 and version == 13050
    assert fake.runtime.cudaDriverGetVersion() == (fake.runtime.cudaError_t.cudaSuccess, 0)


@pytest.mark.parametrize(("profile", "bindings", "libcudart"),
                         [("h200-r580", 13050, 13000), ("h100-r575", 12090, 12090)])
def test_each_runtime_instance_reports_its_own_version(profile: str, bindings: int,
                                                       libcudart: int) -> None:
    # docs/cuda-runtime.md §6: cuda-bindings' static runtime "reports 12090 or 13040,
    # independent of the system libcudart 13.0" [OBS-local]; §9 (0, 12090) for 12.9.x;
    # §2.2: libcudart 13.0 reports 13000 [OBS-local]. torch's bundled runtime is another
    # instance with its own version.
    fake = FakeCuda(profile)
    assert fake.runtime.cudaRuntimeGetVersion()[1] == bindings
    assert fake.torch_runtime.runtime_get_version() == (0, libcudart)
    assert fake.cuda_runtime is not fake.torch_runtime


def test_bindings_version_matches_the_installed_cuda_bindings() -> None:
    # docs/cuda-runtime.md §6/§9: the version is the installed binding's own; checked against
    # the real module when cuda-bindings 13.5.0 is the one installed
    real = pytest.importorskip("cuda.bindings.runtime", reason="cuda-bindings is not installed")
    from importlib import metadata

    if metadata.version("cuda-bindings") != "13.5.0":
        pytest.skip(f"profile values are for cuda-bindings 13.5.0, installed "
                    f"{metadata.version('cuda-bindings')}")
    err, version = real.cudaRuntimeGetVersion()
    assert int(err) == 0 and version == FakeCuda().runtime.cudaRuntimeGetVersion()[1] == 13050


def test_no_gpu_driver_version_is_reported() -> None:
    # docs/cuda-runtime.md §2.2 no-GPU row: a driver is present [DOC]
    fake = FakeCuda("no-gpu")
    err, version = fake.runtime.cudaDriverGetVersion()
    assert int(err) == 0 and version > 0
    assert int(fake.runtime.cudaGetDeviceCount()[0]) == 100


@pytest.mark.parametrize(("profile", "code"), MODES, ids=MODE_IDS)
def test_error_strings_still_work(profile: Any, code: int) -> None:
    # docs/cuda-runtime.md §1 conformance note: cudaGetErrorString works without a driver
    # [OBS-local]
    fake = FakeCuda(profile)
    err, text = fake.runtime.cudaGetErrorString(code)
    assert int(err) == 0 and text
    assert fake.torch.cudaGetErrorString(fake.torch.cudaError(code))


@pytest.mark.parametrize(("profile", "code"), MODES, ids=MODE_IDS)
def test_torch_face_returns_the_init_error(profile: Any, code: int) -> None:
    # docs/cuda-runtime.md §2.2 no-driver row; §7 torch's cudaHostRegister returns cudaError
    fake = FakeCuda(profile)
    base = fake.virtual(4096).data_ptr()
    t = fake.torch
    assert t.cudaHostRegister(base, 4096, 0) == code
    assert t.cudaHostUnregister(base) == code
    assert t.cudaProfilerStart() == code
    with pytest.raises(RuntimeError):
        # docs/cuda-runtime.md §7: cudaMemGetInfo raises on error (C10_CUDA_CHECK)
        t.cudaMemGetInfo(0)


def test_no_driver_batch_12x_arity() -> None:
    # docs/cuda-runtime.md §5.3 "With no driver, both versions return error 35 (12.9 as the pair
    # (35, None), 13.x as (35,))" [OBS-local]
    fake = FakeCuda(DeviceProfile(name="nd12", env="no_driver", device_count=0,
                                  driver_version=0, bindings_major=12))
    rt = fake.runtime
    attrs = rt.cudaMemcpyAttributes()
    attrs.srcAccessOrder = 1
    res = rt.cudaMemcpyBatchAsync([1], [2], [3], 1, [attrs], [0], 1, 2)
    assert int(res[0]) == 35 and res[1:] == (None,)
    res13 = FakeCuda("no-driver").runtime.cudaMemcpyBatchAsync([1], [2], [3], 1, [attrs], [0], 1,
                                                               2)
    assert len(res13) == 1 and int(res13[0]) == 35


def test_healthy_profile_reports_devices() -> None:
    # docs/cuda-runtime.md §2.2: the control for the modes above
    fake = FakeCuda("h200-r580")
    assert fake.runtime.cudaGetDeviceCount() == (fake.runtime.cudaError_t.cudaSuccess, 1)
    assert int(fake.runtime.cudaGetLastError()[0]) == 0
