"""CORRECT (ctypes style), with a once-only teardown: libcudart through ctypes, chunks within
the declared chunk limit on copy-unit seams, an all-or-nothing register, and a teardown that
unregisters each chunk base once, as code that pins a region and releases it at worker exit
does (exllamav3's ``model_tp_cuda.py``: one ``cudaHostUnregister`` per region from ``close()``;
docs/real-code-trials.md §3). A second teardown would unregister every base again and fail
(713 cudaErrorHostMemoryNotRegistered): the code never declares a repeatable teardown, and its
caller never calls it twice, so kvreg runs one teardown round and skips the scenarios that
judge only the repeatable-teardown contract.
"""

from __future__ import annotations

import ctypes
import ctypes.util


def _lib() -> ctypes.CDLL:
    lib = ctypes.CDLL(ctypes.util.find_library("cudart") or "libcudart.so")
    lib.cudaHostRegister.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
    lib.cudaHostRegister.restype = ctypes.c_int
    lib.cudaHostUnregister.argtypes = [ctypes.c_void_p]
    lib.cudaHostUnregister.restype = ctypes.c_int
    lib.cudaGetLastError.restype = ctypes.c_int
    return lib


def _unregister_all(lib: ctypes.CDLL, ranges: list[tuple[int, int]]) -> list[int]:
    """Unregister every base, newest first; the codes that failed (each drained)."""
    failed = []
    for base, _ in reversed(ranges):
        rc = lib.cudaHostUnregister(base)
        if rc:
            lib.cudaGetLastError()
            failed.append(rc)
    return failed


def register(ptr: int, nbytes: int, *, granularity: int | None,
             chunk_limit: int) -> list[tuple[int, int]]:
    unit = granularity or 4096
    if unit > chunk_limit:
        raise ValueError(f"granularity {unit} exceeds the chunk limit {chunk_limit}")
    step = chunk_limit - chunk_limit % unit
    lib = _lib()
    done: list[tuple[int, int]] = []
    for off in range(0, nbytes, step):
        size = min(step, nbytes - off)
        rc = lib.cudaHostRegister(ptr + off, size, 0)
        if rc:
            lib.cudaGetLastError()
            _unregister_all(lib, done)
            raise RuntimeError(f"cudaHostRegister({ptr + off:#x}, {size}) failed (rc={rc})")
        done.append((ptr + off, size))
    return done


def teardown(ranges: list[tuple[int, int]]) -> None:
    """Release each chunk once (the list is left as it is: a second call is an error)."""
    failed = _unregister_all(_lib(), ranges)
    if failed:
        raise RuntimeError(f"cudaHostUnregister failed (rc={failed[0]})")
