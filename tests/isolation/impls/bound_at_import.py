"""Correct implementations that bind what they call at import and read their configuration
there, as real code does: ``from cuda.bindings.runtime import cudaHostRegister``, the
driver's functions and one ``cuInit`` per process, ``torch.cuda.cudart()`` kept in a global
set at import, and the chunk limit read from the environment once. kvreg imports them under
a fake of the worker's configuration, and the doors carry each call to the current one.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from caching import plan
from cuda.bindings.driver import cuInit, cuMemHostRegister, cuMemHostUnregister
from cuda.bindings.runtime import cudaGetLastError, cudaHostRegister, cudaHostUnregister

CUDART = torch.cuda.cudart()
CHUNK_LIMIT = max(int(os.environ.get("SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB", "256")), 1) << 30
(_INIT,) = cuInit(0)          # once per process, as the driver API wants
RANGES = "_kvreg_test_ranges"


# -- cuda-bindings' runtime, functions bound at import (ctypes style: the code reaches CUDA) --
def bindings_register(ptr: int, nbytes: int, *, granularity: int | None,
                      chunk_limit: int) -> list[tuple[int, int]]:
    done: list[tuple[int, int]] = []
    for off, size in plan(nbytes, granularity, chunk_limit):
        (err,) = cudaHostRegister(ptr + off, size, 0)
        if int(err) != 0:
            cudaGetLastError()
            for base, _ in reversed(done):
                if int(cudaHostUnregister(base)[0]):
                    cudaGetLastError()
            raise RuntimeError(f"cudaHostRegister({ptr + off:#x}, {size}) failed: {int(err)}")
        done.append((ptr + off, size))
    return done


def bindings_teardown(ranges: list[tuple[int, int]]) -> None:
    failed = []
    for base, size in reversed(ranges):
        if int(cudaHostUnregister(base)[0]):
            cudaGetLastError()
            failed.append((base, size))
    ranges[:] = list(reversed(failed))
    if failed:
        raise RuntimeError(f"cudaHostUnregister failed for {len(failed)} chunk(s)")


# -- the driver API, bound at import, cuInit once ---------------------------------------------
def driver_register(ptr: int, nbytes: int, *, granularity: int | None,
                    chunk_limit: int) -> list[tuple[int, int]]:
    if int(_INIT) != 0:
        raise RuntimeError(f"cuInit failed at import: {int(_INIT)}")
    done: list[tuple[int, int]] = []
    for off, size in plan(nbytes, granularity, chunk_limit):
        (err,) = cuMemHostRegister(ptr + off, size, 0)
        if int(err) != 0:
            for base, _ in reversed(done):
                cuMemHostUnregister(base)
            raise RuntimeError(f"cuMemHostRegister({ptr + off:#x}, {size}) failed: {int(err)}")
        done.append((ptr + off, size))
    return done


def driver_teardown(ranges: list[tuple[int, int]]) -> None:
    failed = [(b, s) for b, s in reversed(ranges) if int(cuMemHostUnregister(b)[0])]
    ranges[:] = list(reversed(failed))
    if failed:
        raise RuntimeError(f"cuMemHostUnregister failed for {len(failed)} chunk(s)")


# -- sglang style: cudart and the chunk limit taken at import ---------------------------------
def sglang_register(buffer: Any, granularity: int | None = None) -> None:
    from caching import _slab

    base, total = buffer.data_ptr(), buffer.numel() * buffer.element_size()
    g = granularity if granularity is not None else _slab(buffer, CHUNK_LIMIT)
    done: list[tuple[int, int]] = []
    for off, size in plan(total, g, CHUNK_LIMIT):
        rc = int(CUDART.cudaHostRegister(base + off, size, 0))
        if rc != 0:
            for ptr, _ in reversed(done):
                CUDART.cudaHostUnregister(ptr)
            raise RuntimeError(f"cudaHostRegister failed (rc={rc}) at offset={off} size={size}")
        done.append((base + off, size))
    setattr(buffer, RANGES, done)


def sglang_teardown(buffer: Any) -> None:
    failed = []
    for ptr, size in reversed(getattr(buffer, RANGES, [])):
        if int(CUDART.cudaHostUnregister(ptr)) != 0:
            failed.append((ptr, size))
    setattr(buffer, RANGES, list(reversed(failed)))
    if failed:
        raise RuntimeError(f"cudaHostUnregister failed for {len(failed)} chunk(s)")
