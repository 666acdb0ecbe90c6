"""ctypes pinning as projects write it without a chunk-limit contract of their own
(exllamav3's ``model_tp_cuda.py`` shape): libcudart loaded with ``ctypes.CDLL``, one
``cudaHostRegister`` per chunk, a failure rolled back and raised with its code. Which runtime
instance the handle is decides what an undrained error costs (docs/cuda-runtime.md §6.1-§6.2):

- ``register_private``: ``ctypes.CDLL("libcudart.so")``, a toolkit's file the loader maps
  apart from torch's libcudart; the failed call's error stays in that instance, which no
  kernel-launch check of torch's reads. CORRECT under ``private_cudart_error = "unread"``
  (a warning), BROKEN under ``"read"`` (error-pending).
- ``register_torch_soname``: ``find_library("cudart")``'s answer, the soname PyPI CUDA
  builds of torch load at import: torch's instance, whose next kernel-launch check reports
  the error. BROKEN under either setting: error-pending.
- ``register_private_drained``: the private handle, drained with ``cudaGetLastError``.
  CORRECT under either setting, nothing pending.
"""

from __future__ import annotations

import ctypes
import ctypes.util


def _lib(name: str) -> ctypes.CDLL:
    lib = ctypes.CDLL(name)
    lib.cudaHostRegister.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
    lib.cudaHostRegister.restype = ctypes.c_int
    lib.cudaHostUnregister.argtypes = [ctypes.c_void_p]
    lib.cudaHostUnregister.restype = ctypes.c_int
    lib.cudaGetLastError.restype = ctypes.c_int
    return lib


def _pin(name: str, drain: bool, ptr: int, nbytes: int, granularity: int | None,
         chunk_limit: int) -> list[tuple[int, int]]:
    lib = _lib(name)
    unit = granularity or 4096
    step = chunk_limit // unit * unit
    done: list[tuple[int, int]] = []
    for off in range(0, nbytes, step):
        size = min(step, nbytes - off)
        rc = lib.cudaHostRegister(ptr + off, size, 0)
        if rc:
            if drain:
                lib.cudaGetLastError()
            done[:] = [(b, s) for b, s in reversed(done) if lib.cudaHostUnregister(b)]
            raise RuntimeError(f"cudaHostRegister({ptr + off:#x}, {size}) failed: error {rc}")
        done.append((ptr + off, size))
    return done


def register_private(ptr: int, nbytes: int, *, granularity: int | None,
                     chunk_limit: int) -> list[tuple[int, int]]:
    return _pin("libcudart.so", False, ptr, nbytes, granularity, chunk_limit)


def register_torch_soname(ptr: int, nbytes: int, *, granularity: int | None,
                          chunk_limit: int) -> list[tuple[int, int]]:
    name = ctypes.util.find_library("cudart") or "libcudart.so.13"
    return _pin(name, False, ptr, nbytes, granularity, chunk_limit)


def register_private_drained(ptr: int, nbytes: int, *, granularity: int | None,
                             chunk_limit: int) -> list[tuple[int, int]]:
    return _pin("libcudart.so", True, ptr, nbytes, granularity, chunk_limit)


def teardown(ranges: list[tuple[int, int]]) -> None:
    lib = _lib("libcudart.so")
    ranges[:] = [(b, s) for b, s in reversed(ranges) if lib.cudaHostUnregister(b)]
