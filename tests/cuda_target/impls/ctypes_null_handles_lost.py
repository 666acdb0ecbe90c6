"""BROKEN twin of ctypes_null_handles: each chunk's handle is a fresh ``c_void_p()``, NULL,
not the chunk's base, so teardown unregisters NULL and every chunk stays pinned.

kvreg must judge it (leak of every chunk, the NULL calls as warnings), not crash on the
None that ctypes hands over for NULL.
"""

from __future__ import annotations

import ctypes

from ctypes_null_handles import _lib, teardown

__all__ = ["register", "teardown"]


def register(ptr: int, nbytes: int, *, granularity: int | None,
             chunk_limit: int) -> list[ctypes.c_void_p]:
    lib = _lib()
    unit = granularity or 4096
    step = chunk_limit // unit * unit
    done: list[ctypes.c_void_p] = []
    for off in range(0, nbytes, step):
        handle = ctypes.c_void_p()
        rc = lib.cudaHostRegister(ctypes.c_void_p(ptr + off), min(step, nbytes - off), 0)
        if rc:
            lib.cudaGetLastError()
            raise RuntimeError(f"cudaHostRegister failed with error {rc}")
        done.append(handle)                        # BUG: never set to the chunk's base
    return done
