"""ctypes pinning with a list of libcudart names to fall back on (exllamav3's
``model_tp_cuda.py`` loader shape, docs/real-code-trials.md §3): the unversioned
``libcudart.so`` first, then the sonames of CUDA 12 and 11, then ``find_library("cudart")``;
no name loads: OSError. One ``cudaHostRegister`` per chunk, a failure rolled back and raised
with its code, the failed call's last error never drained. Which name loads decides which
runtime instance keeps that error (docs/cuda-runtime.md §6.1-§6.3):

- with a CUDA toolkit (profile option ``libcudart_install = "toolkit"``, the default):
  ``libcudart.so``, a file apart from torch's: a private instance, a warning under
  ``private_cudart_error = "unread"``;
- with PyPI's wheels alone (``"pypi-only"``) and a CUDA 12 torch: ``libcudart.so`` fails, the
  fallback ``libcudart.so.12`` is torch's soname, so torch's instance: error-pending, BROKEN;
- with PyPI's wheels alone and a CUDA 13 torch: no name of the list loads and
  ``find_library`` answers None: register raises OSError, BROKEN (unexpected-error).

``loaded`` records the name each register loaded, so a test can see the fallback run.
"""

from __future__ import annotations

import ctypes
import ctypes.util

NAMES = ("libcudart.so", "libcudart.so.12", "libcudart.so.11")
loaded: list[str] = []


def _lib() -> ctypes.CDLL:
    for name in NAMES:
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        loaded.append(name)
        return lib
    found = ctypes.util.find_library("cudart")
    if found:
        loaded.append(found)
        return ctypes.CDLL(found)
    raise OSError("no libcudart among " + ", ".join(NAMES) + " and find_library found none")


def register(ptr: int, nbytes: int, *, granularity: int | None,
             chunk_limit: int) -> list[tuple[int, int]]:
    lib = _lib()
    unit = granularity or 4096
    step = chunk_limit // unit * unit
    done: list[tuple[int, int]] = []
    for off in range(0, nbytes, step):
        size = min(step, nbytes - off)
        rc = lib.cudaHostRegister(ctypes.c_void_p(ptr + off), ctypes.c_size_t(size),
                                  ctypes.c_uint(0))
        if rc:
            done[:] = [(b, s) for b, s in reversed(done)
                       if lib.cudaHostUnregister(ctypes.c_void_p(b))]
            raise RuntimeError(f"cudaHostRegister({ptr + off:#x}, {size}) failed: error {rc}")
        done.append((ptr + off, size))
    return done


def teardown(ranges: list[tuple[int, int]]) -> None:
    lib = _lib()
    ranges[:] = [(b, s) for b, s in reversed(ranges)
                 if lib.cudaHostUnregister(ctypes.c_void_p(b))]
