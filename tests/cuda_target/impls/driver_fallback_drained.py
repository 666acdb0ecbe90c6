"""CORRECT variant (driver style): the libcudart fast path with a driver-API fallback that
drains the runtime's error first.

A chunk whose ``cudaHostRegister`` fails is drained with ``cudaGetLastError`` on the same
libcudart handle (docs/cuda-runtime.md §6) before ``cuMemHostRegister`` retries it; a chunk
that fails both ways rolls everything back and raises with the driver's error name.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Any


class Doors:
    """One libcudart handle and the driver module, used together."""

    def __init__(self) -> None:
        from cuda.bindings import driver

        self.drv = driver
        (err,) = driver.cuInit(0)
        if int(err):
            raise RuntimeError(f"cuInit failed (CUresult {int(err)})")
        self.rt = ctypes.CDLL(ctypes.util.find_library("cudart") or "libcudart.so")
        self.rt.cudaHostRegister.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
        self.rt.cudaHostRegister.restype = ctypes.c_int
        self.rt.cudaGetLastError.restype = ctypes.c_int

    def pin(self, ptr: int, size: int) -> Any:
        """0 on success, else the driver's error after both doors failed."""
        if self.rt.cudaHostRegister(ptr, size, 0) == 0:
            return 0
        self.rt.cudaGetLastError()
        (err,) = self.drv.cuMemHostRegister(ptr, size, 0)
        return err

    def unpin(self, ptr: int) -> int:
        return int(self.drv.cuMemHostUnregister(ptr)[0])


def register(ptr: int, nbytes: int, *, granularity: int | None,
             chunk_limit: int) -> list[tuple[int, int]]:
    doors = Doors()
    unit = granularity or 4096
    step = chunk_limit // unit * unit
    done: list[tuple[int, int]] = []
    off = 0
    while off < nbytes:
        size = min(step, nbytes - off)
        err = doors.pin(ptr + off, size)
        if int(err):
            failed = [b for b, _ in reversed(done) if doors.unpin(b)]
            _, name = doors.drv.cuGetErrorName(err)
            raise RuntimeError(f"cuMemHostRegister({ptr + off:#x}, {size}) failed: "
                               f"{name.decode() if name else int(err)} (rc={int(err)})"
                               + (f"; {len(failed)} chunk(s) not released" if failed else ""))
        done.append((ptr + off, size))
        off += size
    return done


def teardown(ranges: list[tuple[int, int]]) -> None:
    doors = Doors()
    ranges[:] = [(b, s) for b, s in reversed(ranges) if doors.unpin(b)][::-1]
