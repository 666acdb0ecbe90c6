"""Correct implementations that hold on to what they reach CUDA through, across calls.

Each pair (``*_cached`` / ``*_fresh``) is the same all-or-nothing chunked registration; the
cached one keeps its handle in a module global, as real code does: SGLang keeps
``torch.cuda.cudart()``, vLLM's ``CudaRTLibrary`` keeps its ``ctypes.CDLL`` in a global
and sets ``argtypes``/``restype`` on its function pointers once, cuda-python code binds
``from cuda.bindings.runtime import cudaHostRegister`` at import. A cached handle is not a
bug: a verdict of a cached variant must equal the fresh one's, scenario by scenario.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from typing import Any

import torch

PAGE = 4096
RANGES = "_kvreg_test_ranges"
_CUDART: Any = None
_LIB: Any = None
_DRIVER: Any = None


def plan(nbytes: int, granularity: int | None, chunk_limit: int) -> list[tuple[int, int]]:
    unit = granularity or PAGE
    if unit <= 0:
        raise ValueError(f"granularity must be positive, got {unit}")
    step = chunk_limit - chunk_limit % unit
    if step <= 0:
        raise ValueError(f"granularity {unit} does not fit in the chunk limit {chunk_limit}")
    return [(off, min(step, nbytes - off)) for off in range(0, nbytes, step)]


# -- sglang style: torch.cuda.cudart() ------------------------------------------------------
def _torch_cudart(cached: bool) -> Any:
    global _CUDART
    if not cached:
        return torch.cuda.cudart()
    if _CUDART is None:
        _CUDART = torch.cuda.cudart()
    return _CUDART


def _chunk_limit() -> int:
    return max(int(os.environ.get("SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB", "256")), 1) << 30


def _slab(buffer: Any, limit: int) -> int:
    """The largest outer-dimension slab of ``buffer`` that fits ``limit`` (pages never
    straddle one)."""
    shape = [int(d) for d in buffer.shape]
    item = int(buffer.element_size())
    for depth in range(1, len(shape) + 1):
        slab = item
        for d in shape[depth:]:
            slab *= d
        if slab <= limit:
            return slab
    return item


def register_chunks(cudart: Any, buffer: Any, granularity: int | None, limit: int) -> None:
    """The sglang-style all-or-nothing registration of ``buffer`` in chunks under ``limit``,
    whatever handle and limit a variant brings."""
    base, total = buffer.data_ptr(), buffer.numel() * buffer.element_size()
    g = granularity if granularity is not None else _slab(buffer, limit)
    done: list[tuple[int, int]] = []
    for off, size in plan(total, g, limit):
        rc = int(cudart.cudaHostRegister(base + off, size, 0))
        if rc != 0:
            for ptr, _ in reversed(done):
                cudart.cudaHostUnregister(ptr)
            raise RuntimeError(f"cudaHostRegister failed (rc={rc}) at offset={off} size={size}")
        done.append((base + off, size))
    setattr(buffer, RANGES, done)


def release_chunks(cudart: Any, buffer: Any) -> None:
    """Unregister what ``register_chunks`` registered, keeping (and raising on) what failed."""
    failed = []
    for ptr, size in reversed(getattr(buffer, RANGES, [])):
        rc = int(cudart.cudaHostUnregister(ptr))
        if rc != 0:
            failed.append((ptr, size))
    setattr(buffer, RANGES, list(reversed(failed)))
    if failed:
        raise RuntimeError(f"cudaHostUnregister failed for {len(failed)} chunk(s)")


def sglang_cached(buffer: Any, granularity: int | None = None) -> None:
    register_chunks(_torch_cudart(True), buffer, granularity, _chunk_limit())


def sglang_cached_teardown(buffer: Any) -> None:
    release_chunks(_torch_cudart(True), buffer)


def sglang_fresh(buffer: Any, granularity: int | None = None) -> None:
    register_chunks(_torch_cudart(False), buffer, granularity, _chunk_limit())


def sglang_fresh_teardown(buffer: Any) -> None:
    release_chunks(_torch_cudart(False), buffer)


# -- ctypes style: libcudart through ctypes.CDLL (vLLM's CudaRTLibrary) ------------------------
def _load_cudart() -> Any:
    lib = ctypes.CDLL(ctypes.util.find_library("cudart") or "libcudart.so")
    lib.cudaHostRegister.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
    lib.cudaHostRegister.restype = ctypes.c_int
    lib.cudaHostUnregister.argtypes = [ctypes.c_void_p]
    lib.cudaGetLastError.argtypes = []
    return lib


def _ctypes_lib(cached: bool) -> Any:
    global _LIB
    if not cached:
        return _load_cudart()
    if _LIB is None:
        _LIB = _load_cudart()
    return _LIB


def _ctypes_register(ptr: int, nbytes: int, granularity: int | None, chunk_limit: int,
                     cached: bool) -> list[tuple[int, int]]:
    chunks = plan(nbytes, granularity, chunk_limit)
    lib = _ctypes_lib(cached)
    done: list[tuple[int, int]] = []
    for off, size in chunks:
        code = lib.cudaHostRegister(ptr + off, size, 0)
        if code != 0:
            lib.cudaGetLastError()
            for base, _ in reversed(done):
                if lib.cudaHostUnregister(base) != 0:
                    lib.cudaGetLastError()
            raise RuntimeError(f"cudaHostRegister({ptr + off:#x}, {size}) failed: rc={code}")
        done.append((ptr + off, size))
    return done


def _ctypes_teardown(ranges: list[tuple[int, int]], cached: bool) -> None:
    if not ranges:
        return
    lib = _ctypes_lib(cached)
    failed = []
    for base, size in reversed(ranges):
        if lib.cudaHostUnregister(base) != 0:
            lib.cudaGetLastError()
            failed.append((base, size))
    ranges[:] = list(reversed(failed))
    if failed:
        raise RuntimeError(f"cudaHostUnregister failed for {len(failed)} chunk(s)")


def ctypes_cached(ptr: int, nbytes: int, *, granularity: int | None,
                  chunk_limit: int) -> list[tuple[int, int]]:
    return _ctypes_register(ptr, nbytes, granularity, chunk_limit, True)


def ctypes_cached_teardown(ranges: list[tuple[int, int]]) -> None:
    _ctypes_teardown(ranges, True)


def ctypes_fresh(ptr: int, nbytes: int, *, granularity: int | None,
                 chunk_limit: int) -> list[tuple[int, int]]:
    return _ctypes_register(ptr, nbytes, granularity, chunk_limit, False)


def ctypes_fresh_teardown(ranges: list[tuple[int, int]]) -> None:
    _ctypes_teardown(ranges, False)


# -- driver style: cuda.bindings.driver kept in a global -----------------------------------------
def _driver(cached: bool) -> Any:
    global _DRIVER
    if cached and _DRIVER is not None:
        return _DRIVER
    from cuda.bindings import driver

    (err,) = driver.cuInit(0)
    if int(err) != 0:
        raise RuntimeError(f"cuInit failed: {int(err)}")
    if cached:
        _DRIVER = driver
    return driver


def _driver_register(ptr: int, nbytes: int, granularity: int | None, chunk_limit: int,
                     cached: bool) -> list[tuple[int, int]]:
    chunks = plan(nbytes, granularity, chunk_limit)
    driver = _driver(cached)
    done: list[tuple[int, int]] = []
    for off, size in chunks:
        (err,) = driver.cuMemHostRegister(ptr + off, size, 0)
        if int(err) != 0:
            for base, _ in reversed(done):
                driver.cuMemHostUnregister(base)
            raise RuntimeError(f"cuMemHostRegister({ptr + off:#x}, {size}) failed: "
                               f"rc={int(err)}")
        done.append((ptr + off, size))
    return done


def _driver_teardown(ranges: list[tuple[int, int]], cached: bool) -> None:
    if not ranges:
        return
    driver = _driver(cached)
    failed = [(b, s) for b, s in reversed(ranges) if int(driver.cuMemHostUnregister(b)[0])]
    ranges[:] = list(reversed(failed))
    if failed:
        raise RuntimeError(f"cuMemHostUnregister failed for {len(failed)} chunk(s)")


def driver_cached(ptr: int, nbytes: int, *, granularity: int | None,
                  chunk_limit: int) -> list[tuple[int, int]]:
    return _driver_register(ptr, nbytes, granularity, chunk_limit, True)


def driver_cached_teardown(ranges: list[tuple[int, int]]) -> None:
    _driver_teardown(ranges, True)


def driver_fresh(ptr: int, nbytes: int, *, granularity: int | None,
                 chunk_limit: int) -> list[tuple[int, int]]:
    return _driver_register(ptr, nbytes, granularity, chunk_limit, False)


def driver_fresh_teardown(ranges: list[tuple[int, int]]) -> None:
    _driver_teardown(ranges, False)
