"""BROKEN (ctypes style): retries a failed chunk in two halves and never drains the error.

Registration goes through libcudart loaded with ctypes, as vLLM's ``CudaRTLibrary`` does. A
failed ``cudaHostRegister`` is retried in two halves on granularity multiples; when the
retry succeeds the pool ends fully registered, but the failed call's error stays in that
libcudart instance's last-error slot, where the next ``cudaGetLastError`` check of an
unrelated kernel launch finds it (docs/cuda-runtime.md §6). Expected rule: error-pending.
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
    return lib


def _undo(lib: ctypes.CDLL, done: list[tuple[int, int]]) -> None:
    for base, _ in reversed(done):
        lib.cudaHostUnregister(base)


def register(ptr: int, nbytes: int, *, granularity: int | None,
             chunk_limit: int) -> list[tuple[int, int]]:
    lib = _lib()
    unit = granularity or 4096
    step = chunk_limit - chunk_limit % unit
    done: list[tuple[int, int]] = []
    for off in range(0, nbytes, step):
        size = min(step, nbytes - off)
        rc = lib.cudaHostRegister(ptr + off, size, 0)
        if rc == 0:
            done.append((ptr + off, size))
            continue
        half = size // unit // 2 * unit
        pieces = [(off, half), (off + half, size - half)] if half else []
        for p_off, p_size in pieces:
            rc = lib.cudaHostRegister(ptr + p_off, p_size, 0)
            if rc != 0:
                break
            done.append((ptr + p_off, p_size))
        if rc != 0 or not pieces:
            _undo(lib, done)
            raise RuntimeError(f"cudaHostRegister failed (rc={rc}) at offset {off}")
    return done


def teardown(ranges: list[tuple[int, int]]) -> None:
    lib = _lib()
    ranges[:] = [(b, s) for b, s in reversed(ranges) if lib.cudaHostUnregister(b) != 0]
