"""CORRECT variant (ctypes style): a pool handle per buffer, NULL for an empty one.

Written as ctypes pinning code is in the wild: each chunk's base kept as a ``c_void_p``
(whose ``.value`` is None for address 0), and teardown unregistering every handle it holds,
an empty buffer's NULL included. The real runtime answers ``cudaHostUnregister(NULL)`` with
an error and releases nothing (docs/cuda-runtime.md §3); the code drains that error on the
handle that recorded it (§6), so nothing is lost and nothing is left pending. kvreg must
judge the NULL call (a warning), never crash on ctypes' None.
"""

from __future__ import annotations

import ctypes

_LIB: ctypes.CDLL | None = None


def _lib() -> ctypes.CDLL:
    global _LIB
    if _LIB is None:
        lib = ctypes.CDLL("libcudart.so")
        lib.cudaHostRegister.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
        lib.cudaHostUnregister.argtypes = [ctypes.c_void_p]
        lib.cudaGetLastError.argtypes = []
        _LIB = lib
    return _LIB


def register(ptr: int, nbytes: int, *, granularity: int | None,
             chunk_limit: int) -> list[ctypes.c_void_p]:
    lib = _lib()
    if nbytes == 0:
        return [ctypes.c_void_p(ptr or None)]     # nothing to pin: its handle is NULL
    unit = granularity or 4096
    step = chunk_limit // unit * unit
    done: list[ctypes.c_void_p] = []
    for off in range(0, nbytes, step):
        base = ctypes.c_void_p(ptr + off)
        rc = lib.cudaHostRegister(base, min(step, nbytes - off), 0)
        if rc:
            lib.cudaGetLastError()
            kept = [h for h in reversed(done) if lib.cudaHostUnregister(h)]
            lib.cudaGetLastError()
            done[:] = kept
            raise RuntimeError(f"cudaHostRegister failed with error {rc}")
        done.append(base)
    return done


def teardown(handles: list[ctypes.c_void_p]) -> None:
    lib = _lib()
    kept = []
    for h in reversed(handles):
        if lib.cudaHostUnregister(h):
            lib.cudaGetLastError()
            if h.value:                            # NULL holds nothing to retry
                kept.append(h)
    handles[:] = kept[::-1]
