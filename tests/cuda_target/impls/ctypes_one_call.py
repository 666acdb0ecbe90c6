"""CORRECT below the per-call ceiling (ctypes style), with no chunk-limit contract: libcudart
through ctypes, one cudaHostRegister over the whole buffer, a failure drained from the same
handle (docs/cuda-runtime.md §6) and raised with its name.

Its register has no ``chunk_limit`` parameter and ``granularity=None``: it declares neither
contract, so kvreg passes granularity None and no chunk_limit, and judges its calls against the
device profile only. A pool of 512 GiB or more fails its one call with 2 on R580+ drivers
(docs/cuda-runtime.md §2.2): a real failure, which kvreg reports.
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
    lib.cudaGetErrorName.argtypes = [ctypes.c_int]
    lib.cudaGetErrorName.restype = ctypes.c_char_p
    return lib


def register(ptr: int, nbytes: int, *, granularity: int | None = None
             ) -> list[tuple[int, int]]:
    if nbytes == 0:
        return []
    lib = _lib()
    rc = lib.cudaHostRegister(ptr, nbytes, 0)
    if rc:
        lib.cudaGetLastError()
        name = (lib.cudaGetErrorName(rc) or b"?").decode()
        raise RuntimeError(f"cudaHostRegister({ptr:#x}, {nbytes}) failed: {name} (rc={rc})")
    return [(ptr, nbytes)]


def teardown(ranges: list[tuple[int, int]]) -> None:
    """Release each base once, draining a failure; keep what failed for a later retry."""
    lib = _lib()
    kept = []
    for base, size in ranges:
        if lib.cudaHostUnregister(base):
            lib.cudaGetLastError()
            kept.append((base, size))
    ranges[:] = kept


# a second teardown retries only what failed: the repeatable-teardown contract, declared
teardown.repeatable = True   # type: ignore[attr-defined]
