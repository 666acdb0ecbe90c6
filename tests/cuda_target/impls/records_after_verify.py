"""BROKEN (ctypes style): a chunk enters the list only after its check passed, and the
rollback releases only that list.

Each chunk is verified with ``cudaHostGetDevicePointer`` and ``cudaPointerGetAttributes``
after its ``cudaHostRegister``, as careful code does; but when a check fails, the chunk it
checked is registered and not yet recorded, so the rollback leaves it pinned.

Expected rule: not-rolled-back (the registered-but-unverified chunk), on every scenario that
fails a verifying query; where no query fails it is correct.
"""

from __future__ import annotations

import ctypes
import ctypes.util


class PointerAttributes(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("device", ctypes.c_int),
                ("devicePointer", ctypes.c_void_p), ("hostPointer", ctypes.c_void_p),
                ("reserved", ctypes.c_long * 8)]


def _lib() -> ctypes.CDLL:
    lib = ctypes.CDLL(ctypes.util.find_library("cudart") or "libcudart.so")
    vp = ctypes.c_void_p
    lib.cudaHostRegister.argtypes = [vp, ctypes.c_size_t, ctypes.c_uint]
    lib.cudaHostUnregister.argtypes = [vp]
    lib.cudaHostGetDevicePointer.argtypes = [vp, vp, ctypes.c_uint]
    lib.cudaPointerGetAttributes.argtypes = [vp, vp]
    return lib


def register(ptr: int, nbytes: int, *, granularity: int | None,
             chunk_limit: int) -> list[tuple[int, int]]:
    lib = _lib()
    unit = granularity or 4096
    step = chunk_limit // unit * unit
    done: list[tuple[int, int]] = []
    for off in range(0, nbytes, step):
        size = min(step, nbytes - off)
        rc = lib.cudaHostRegister(ptr + off, size, 0)
        if rc == 0:
            dev = ctypes.c_void_p()
            rc = lib.cudaHostGetDevicePointer(ctypes.byref(dev), ptr + off, 0)
        if rc == 0:
            rc = lib.cudaPointerGetAttributes(ctypes.byref(PointerAttributes()), ptr + off)
        if rc:
            lib.cudaGetLastError()
            for base, _ in reversed(done):      # the bug: the chunk just checked is not here
                lib.cudaHostUnregister(base)
            raise RuntimeError(f"chunk at offset {off} failed (rc={rc})")
        done.append((ptr + off, size))
    return done


def teardown(ranges: list[tuple[int, int]]) -> None:
    lib = _lib()
    ranges[:] = [(b, s) for b, s in reversed(ranges) if lib.cudaHostUnregister(b)][::-1]
