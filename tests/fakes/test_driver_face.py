"""The ``cuda.bindings.driver`` face: cuMemHostRegister and friends (docs/cuda-runtime.md §6).

The driver API is the workaround that leaves the runtime's error state alone
(local-inference-lab/vllm PR #217); its registrations are the driver's, shared with every
runtime face. Return conventions are cuda-python's: ``(CUresult, outputs...)`` tuples.
"""

from __future__ import annotations

import pytest

from kvreg.fakes.cuda.cuda_python_face import NotModelledError
from kvreg.fakes.cuda.fake_cuda import FakeCuda
from kvreg.fakes.cuda.profile import PROFILES
from kvreg.fakes.doors import door_target

MiB = 1 << 20


def _ready(profile: str = "h200-r580") -> tuple[FakeCuda, object, int]:
    fake = FakeCuda(profile)
    drv = fake.driver_api
    assert int(drv.cuInit(0)[0]) == 0
    # memory calls need a current context (cuda.h; docs/cuda-runtime.md §13): the primary one
    err, ctx = drv.cuDevicePrimaryCtxRetain(0)
    assert int(err) == 0 and int(drv.cuCtxSetCurrent(ctx)[0]) == 0
    return fake, drv, fake.virtual(4 * MiB).data_ptr()


def test_patch_puts_the_face_in_place_of_cuda_bindings_driver() -> None:
    fake = FakeCuda()
    with fake.patch():
        from cuda.bindings import driver

        assert door_target(driver) is fake.driver_api
        import cuda.bindings.driver as again

        assert door_target(again) is fake.driver_api


def test_calls_before_cuinit_give_not_initialized() -> None:
    # cuda.h: cuInit must be called before any other driver function -> 3 [DOC]
    fake = FakeCuda()
    drv = fake.driver_api
    base = fake.virtual(MiB).data_ptr()
    assert int(drv.cuMemHostRegister(base, MiB, 0)[0]) == 3
    assert drv.cuDeviceGetCount() == (drv.CUresult(3), None)
    assert fake.live_registrations() == []
    assert drv.cuDriverGetVersion() == (drv.CUresult(0), 13000)   # needs no cuInit


def test_register_rules_are_the_runtimes() -> None:
    # docs/cuda-runtime.md §2.2: overlap -> 712, size 0 -> 1, 512 GiB -> 2; §3: interior -> 1, twice
    # -> 713
    fake, drv, base = _ready()
    r = drv.CUresult
    assert drv.cuMemHostRegister(base, MiB, 0) == (r.CUDA_SUCCESS,)
    assert drv.cuMemHostRegister(base + 80, 160, 0) == \
        (r.CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED,)
    assert drv.cuMemHostRegister(base + MiB, 0, 0) == (r.CUDA_ERROR_INVALID_VALUE,)
    big = fake.virtual(600 << 30).data_ptr()
    assert drv.cuMemHostRegister(big, 512 << 30, 0) == (r.CUDA_ERROR_OUT_OF_MEMORY,)
    assert drv.cuMemHostRegister(base + MiB, MiB, 8) == (r.CUDA_ERROR_NOT_SUPPORTED,)
    assert drv.cuMemHostUnregister(base + 4096) == (r.CUDA_ERROR_INVALID_VALUE,)
    assert drv.cuMemHostUnregister(base) == (r.CUDA_SUCCESS,)
    assert drv.cuMemHostUnregister(base) == (r.CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED,)
    assert drv.cuMemHostRegister(0xFF0000000, 4096, 0) == (r.CUDA_ERROR_INVALID_VALUE,)


def test_driver_failures_leave_every_runtime_error_slot_alone() -> None:
    # docs/cuda-runtime.md §6: the driver API "does not touch runtime error state"
    fake, drv, base = _ready()
    assert int(drv.cuMemHostRegister(base, MiB, 0)[0]) == 0
    assert int(drv.cuMemHostRegister(base, MiB, 0)[0]) == 712
    assert int(drv.cuMemHostUnregister(base + 1)[0]) == 1
    assert int(fake.runtime.cudaPeekAtLastError()[0]) == 0
    assert fake.torch_runtime.peek_at_last_error() == 0
    assert fake.libcudart_runtime.peek_at_last_error() == 0
    assert int(drv.cuMemHostUnregister(base)[0]) == 0


def test_pointer_attributes_of_registered_memory() -> None:
    _fake, drv, base = _ready()
    a = drv.CUpointer_attribute
    assert int(drv.cuMemHostRegister(base, MiB, 0)[0]) == 0
    q = base + 4096 + 5
    assert drv.cuPointerGetAttribute(a.CU_POINTER_ATTRIBUTE_MEMORY_TYPE, q)[1] == 1   # host
    err, dev = drv.cuPointerGetAttribute(a.CU_POINTER_ATTRIBUTE_DEVICE_POINTER, q)
    assert int(err) == 0 and isinstance(dev, drv.CUdeviceptr) and int(dev) == q
    assert drv.cuPointerGetAttribute(a.CU_POINTER_ATTRIBUTE_HOST_POINTER, q)[1] == q
    assert int(drv.cuPointerGetAttribute(a.CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, q)[1]) == base
    assert drv.cuPointerGetAttribute(a.CU_POINTER_ATTRIBUTE_RANGE_SIZE, q)[1] == MiB
    assert drv.cuPointerGetAttribute(a.CU_POINTER_ATTRIBUTE_MAPPED, q)[1] is True
    assert drv.cuPointerGetAttribute(a.CU_POINTER_ATTRIBUTE_IS_MANAGED, q)[1] is False
    # unregistered host memory: "not allocated by, mapped by, or registered with a
    # CUcontext" -> CUDA_ERROR_INVALID_VALUE [DOC cuPointerGetAttribute]
    assert drv.cuPointerGetAttribute(a.CU_POINTER_ATTRIBUTE_MEMORY_TYPE, base + 2 * MiB) == \
        (drv.CUresult(1), None)
    with pytest.raises(NotModelledError, match="COVERAGE"):
        drv.cuPointerGetAttribute(a.CU_POINTER_ATTRIBUTE_CONTEXT, q)
    assert int(drv.cuMemHostUnregister(base)[0]) == 0


def test_device_pointer_alias_on_wsl2() -> None:
    # docs/cuda-runtime.md §4: CanUseHostPointerForRegisteredMem = 0 -> the alias differs from the
    # host VA
    _fake, drv, base = _ready("wsl2")
    assert int(drv.cuMemHostRegister(base, MiB, 2)[0]) == 0
    err, alias = drv.cuMemHostGetDevicePointer(base, 0)
    assert int(err) == 0 and int(alias) != base
    assert drv.cuMemHostGetDevicePointer(base, 1) == (drv.CUresult(1), None)


@pytest.mark.parametrize("mode", ["invalid", "flags"])
def test_host_get_flags_follows_the_profile(mode: str) -> None:
    # docs/cuda-runtime.md §4: cudaHostGetFlags on registered memory is [UNC]; the same switch
    # applies
    _fake, drv, base = _ready(PROFILES["h200-r580"].replace(host_get_flags_on_registered=mode))
    assert int(drv.cuMemHostRegister(base, MiB, 3)[0]) == 0
    err, flags = drv.cuMemHostGetFlags(base)
    assert (int(err), flags) == ((1, None) if mode == "invalid" else (0, 3))
    assert int(drv.cuMemHostUnregister(base)[0]) == 0


def test_environment_modes() -> None:
    # docs/cuda-runtime.md §2.2/§11.4: no GPU -> 100, stub -> 34
    no_gpu = FakeCuda("no-gpu").driver_api
    assert int(no_gpu.cuInit(0)[0]) == 100
    assert int(no_gpu.cuMemHostRegister(1 << 60, 4096, 0)[0]) == 3
    stub = FakeCuda(PROFILES["h200-r580"].replace(env="stub")).driver_api
    assert int(stub.cuInit(0)[0]) == 34 and int(stub.cuMemHostRegister(1, 1, 0)[0]) == 34


def test_no_driver_raises_as_the_real_binding_does() -> None:
    fake = FakeCuda("no-driver")
    with pytest.raises(Exception, match="NVIDIA driver library") as ours:
        fake.driver_api.cuInit(0)
    try:
        from cuda.bindings import driver as real
    except ImportError:
        return
    try:
        real.cuInit(0)
    except Exception as exc:   # this machine has no driver: compare the two
        assert type(exc) is type(ours.value)
    else:
        pytest.skip("a driver is installed here: the no-driver answer cannot be compared")


def test_dir_and_hasattr_parity_with_the_real_driver_module() -> None:
    real = pytest.importorskip("cuda.bindings.driver", reason="cuda-bindings is not installed")
    drv = FakeCuda().driver_api
    public = {n for n in dir(real) if not n.startswith("_")}
    assert {n for n in dir(drv) if not n.startswith("_")} == public
    assert all(hasattr(drv, n) for n in public)
    with pytest.raises(NotModelledError):
        drv.cuMemAllocManaged(4096, 1)   # cuMemAlloc is modelled since §14


def test_faults_arm_driver_points_and_are_recorded() -> None:
    fake, drv, base = _ready()
    fake.inject("cuMemHostRegister", nth=1, error=2)
    assert drv.cuMemHostRegister(base, MiB, 0) == (drv.CUresult(2),)
    assert fake.live_registrations() == []
    assert int(drv.cuMemHostRegister(base, MiB, 0)[0]) == 0
    assert [(e.face, e.code, e.injected) for e in fake.trace.calls("cuMemHostRegister")] == \
        [("driver", 2, True), ("driver", 0, False)]
    with pytest.raises(ValueError):
        fake.inject("cuMemHostUnregister", error=712)   # not a code unregister returns
    assert int(drv.cuMemHostUnregister(base)[0]) == 0


def test_error_names_and_strings() -> None:
    drv = FakeCuda().driver_api
    assert drv.cuGetErrorName(712) == (drv.CUresult(0),
                                       b"CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED")
    assert drv.cuGetErrorString(713)[1] == \
        b"pointer does not correspond to a registered memory region"
    assert drv.cuGetErrorName(123456) == (drv.CUresult(1), None)


def test_bad_arguments_raise_before_anything_changes() -> None:
    fake, drv, base = _ready()
    with pytest.raises(TypeError):
        drv.cuMemHostRegister("base", MiB, 0)
    with pytest.raises(OverflowError):
        drv.cuMemHostRegister(base, -1, 0)
    assert fake.live_registrations() == []


def test_runtime_fault_points_also_fail_the_driver_twin() -> None:
    # a scenario's fault plan says "the driver fails this registration": it applies whether
    # the code calls cudaHostRegister or its driver twin cuMemHostRegister (docs/cuda-runtime.md
    # §2.1)
    fake, drv, base = _ready()
    fake.inject("cudaHostRegister", nth=2, error=2)
    assert int(drv.cuMemHostRegister(base, MiB, 0)[0]) == 0
    assert int(drv.cuMemHostRegister(base + MiB, MiB, 0)[0]) == 2
    assert int(drv.cuMemHostRegister(base + MiB, MiB, 0)[0]) == 0
    # a runtime-only code has no CUresult twin: CUDA_ERROR_UNKNOWN
    fake.inject("cudaHostUnregister", nth=1, error=35)
    assert int(drv.cuMemHostUnregister(base)[0]) == 999
    # a plan naming driver points is taken as it is
    fake.faults.clear()
    fake.inject("cudaHostRegister", error=1)
    fake.inject("cuMemHostUnregister", nth=1, error=713)
    assert int(drv.cuMemHostUnregister(base)[0]) == 713
    assert int(drv.cuMemHostUnregister(base)[0]) == 0
    assert int(drv.cuMemHostUnregister(base + MiB)[0]) == 0
