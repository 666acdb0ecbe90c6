"""A runtime call that needs a context initialises the driver for the whole process.

CUDA Runtime API, "Interactions with the CUDA Driver API": the runtime initialises the primary
context at the first call that requires an active context; error-handling and version queries
need none. So after ``cudaFree(0)`` or a ``cudaHostRegister`` through any face, the driver API's
``cuMemHostRegister`` succeeds instead of giving CUDA_ERROR_NOT_INITIALIZED (3): a divergence
found by running NVIDIA/cuda-python's own ``cuda_bindings/tests`` against the fake
(docs/peer-suites.md).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

import pytest

from kvreg.fakes.cuda.fake_cuda import FakeCuda

MiB = 1 << 20


def _cuda_python_free(fake: FakeCuda) -> None:
    assert int(fake.runtime.cudaFree(0)[0]) == 0


def _torch_register(fake: FakeCuda) -> None:
    buf = fake.virtual(MiB)
    assert int(fake.torch.cudaHostRegister(buf.data_ptr(), MiB, 0)) == 0


def _ctypes_free(fake: FakeCuda) -> None:
    lib = fake.load_libcudart("libcudart.so.13")
    lib.cudaFree.argtypes = [ctypes.c_void_p]
    assert int(lib.cudaFree(None)) == 0


def _failed_register(fake: FakeCuda) -> None:
    # the call fails on its argument (size 0 -> 1), but only after it initialised the runtime
    assert int(fake.runtime.cudaHostRegister(fake.virtual(MiB).data_ptr(), 0, 0)[0]) == 1


@pytest.mark.parametrize("first_call", [_cuda_python_free, _torch_register, _ctypes_free,
                                        _failed_register])
def test_a_runtime_call_initialises_the_driver_api(
        first_call: Callable[[FakeCuda], None]) -> None:
    fake = FakeCuda()
    first_call(fake)
    drv = fake.driver_api
    base = fake.virtual(4 * MiB).data_ptr()
    assert drv.cuMemHostRegister(base, MiB, 0) == (drv.CUresult.CUDA_SUCCESS,)
    assert int(drv.cuDeviceGetCount()[0]) == 0
    assert drv.cuMemHostUnregister(base) == (drv.CUresult.CUDA_SUCCESS,)


def test_error_and_version_queries_do_not_initialise() -> None:
    fake = FakeCuda()
    assert int(fake.runtime.cudaGetLastError()[0]) == 0
    assert int(fake.runtime.cudaPeekAtLastError()[0]) == 0
    assert int(fake.runtime.cudaRuntimeGetVersion()[0]) == 0
    assert int(fake.runtime.cudaDriverGetVersion()[0]) == 0
    fake.torch.cudaGetErrorString(fake.torch.cudaError(1))
    drv = fake.driver_api
    assert int(drv.cuMemHostRegister(fake.virtual(MiB).data_ptr(), MiB, 0)[0]) == 3


def test_initialisation_is_per_process_not_per_fake() -> None:
    # a second simulated process (another FakeCuda) starts uninitialised
    _cuda_python_free(FakeCuda())
    drv = FakeCuda().driver_api
    assert int(drv.cuDeviceGetCount()[0]) == 3


def test_a_failing_environment_initialises_nothing() -> None:
    # no GPU: the runtime call fails with 100 and the driver stays uninitialised (cuInit -> 100)
    fake = FakeCuda("no-gpu")
    assert int(fake.runtime.cudaFree(0)[0]) == 100
    drv = fake.driver_api
    assert int(drv.cuDeviceGetCount()[0]) == 3
    assert int(drv.cuInit(0)[0]) == 100
