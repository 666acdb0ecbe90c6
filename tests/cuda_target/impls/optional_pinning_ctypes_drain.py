"""Optional pinning through torch.cuda.cudart() with a pageable fallback that drains the
failed call's error through a libcudart loaded with ctypes. Whether the drain reaches
torch's runtime is the dynamic loader's answer (docs/cuda-runtime.md §6.1): glibc's dlopen
returns the already loaded object for a name equal to its soname, or for its very file
(elf/dl-load.c ``_dl_map_object`` / ``_dl_map_object_from_fd``), so

- CORRECT ``register_soname`` / ``register_found`` / ``register_package_path``: the name or
  path of the libcudart.so.<major> that PyPI CUDA builds of torch load at import
  (torch/__init__.py ``_load_global_deps``): the drain clears torch's error;
- BROKEN ``register_unversioned`` / ``register_toolkit_path``: another file, another runtime
  instance; torch's error stays pending. Expected rule: error-pending.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Any


def _pin(cudart: Any, ptr: int, nbytes: int, granularity: int | None, chunk_limit: int,
         libname: str) -> list[tuple[int, int]]:
    g = granularity or 1
    if g <= 0 or g > chunk_limit:
        raise ValueError(f"granularity {g} must be positive and at most {chunk_limit}")
    chunk = (chunk_limit // g) * g
    done: list[tuple[int, int]] = []
    for off in range(0, nbytes, chunk):
        size = min(chunk, nbytes - off)
        if int(cudart.cudaHostRegister(ptr + off, size, 0)):
            for p, _ in reversed(done):
                cudart.cudaHostUnregister(p)
            lib = ctypes.CDLL(libname)
            lib.cudaGetLastError.restype = ctypes.c_int
            lib.cudaGetLastError()               # drain, then run on pageable memory
            return []
        done.append((ptr + off, size))
    return done


def register_soname(cudart: Any, ptr: int, nbytes: int, *, granularity: int | None,
                    chunk_limit: int) -> list[tuple[int, int]]:
    return _pin(cudart, ptr, nbytes, granularity, chunk_limit, "libcudart.so.13")


def register_found(cudart: Any, ptr: int, nbytes: int, *, granularity: int | None,
                   chunk_limit: int) -> list[tuple[int, int]]:
    name = ctypes.util.find_library("cudart") or "libcudart.so"
    return _pin(cudart, ptr, nbytes, granularity, chunk_limit, name)


def register_package_path(cudart: Any, ptr: int, nbytes: int, *, granularity: int | None,
                          chunk_limit: int) -> list[tuple[int, int]]:
    path = "/usr/lib/python3/site-packages/nvidia/cu13/lib/libcudart.so.13"
    return _pin(cudart, ptr, nbytes, granularity, chunk_limit, path)


def register_unversioned(cudart: Any, ptr: int, nbytes: int, *, granularity: int | None,
                         chunk_limit: int) -> list[tuple[int, int]]:
    return _pin(cudart, ptr, nbytes, granularity, chunk_limit, "libcudart.so")


def register_toolkit_path(cudart: Any, ptr: int, nbytes: int, *, granularity: int | None,
                          chunk_limit: int) -> list[tuple[int, int]]:
    return _pin(cudart, ptr, nbytes, granularity, chunk_limit,
                "/usr/local/cuda/lib64/libcudart.so.13")


def teardown(cudart: Any, ranges: list[tuple[int, int]]) -> None:
    ranges[:] = [(p, s) for p, s in reversed(ranges) if int(cudart.cudaHostUnregister(p))]
