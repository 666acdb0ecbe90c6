"""BROKEN (driver style): pins through libcudart and falls back to ``cuMemHostRegister``,
leaving the runtime's error pending.

Each chunk is first registered with ``cudaHostRegister`` through a ctypes libcudart handle;
when that fails the same chunk is registered with the driver API, which succeeds, so the pool
ends fully registered. The failed runtime call's error is never drained and stays in that
libcudart instance (docs/cuda-runtime.md §6: the driver API has no last-error slot, the
runtime does). Expected rule: error-pending.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Any


def _lib() -> ctypes.CDLL:
    lib = ctypes.CDLL(ctypes.util.find_library("cudart") or "libcudart.so")
    lib.cudaHostRegister.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
    lib.cudaHostRegister.restype = ctypes.c_int
    return lib


def _driver() -> Any:
    from cuda.bindings import driver

    driver.cuInit(0)
    return driver


def register(ptr: int, nbytes: int, *, granularity: int | None,
             chunk_limit: int) -> list[tuple[int, int]]:
    lib, drv = _lib(), _driver()
    unit = granularity or 4096
    step = chunk_limit - chunk_limit % unit
    done: list[tuple[int, int]] = []
    for off in range(0, nbytes, step):
        size = min(step, nbytes - off)
        if lib.cudaHostRegister(ptr + off, size, 0) != 0:
            (err,) = drv.cuMemHostRegister(ptr + off, size, 0)
            if int(err) != 0:
                for base, _ in reversed(done):
                    drv.cuMemHostUnregister(base)
                raise RuntimeError(f"cuMemHostRegister failed (CUresult {int(err)}) at "
                                   f"offset {off}")
        done.append((ptr + off, size))
    return done


def teardown(ranges: list[tuple[int, int]]) -> None:
    drv = _driver()
    ranges[:] = [(b, s) for b, s in reversed(ranges) if int(drv.cuMemHostUnregister(b)[0])]
