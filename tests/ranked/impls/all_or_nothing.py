"""CORRECT, two ways of agreeing across ranks with torch.distributed (vLLM PR #52296's
all-or-nothing registration), generic style:

- ``register_raise``: each rank pins its chunks, the ranks all-reduce MIN of "all pinned";
  where any rank failed, every rank rolls back and raises (the failing rank with its code);
- ``register_fallback``: the same agreement, but every rank rolls back and goes on pageable
  (``pinning = "optional"``), draining the failed call's error through the libcudart torch
  loads (tests/cuda_target/impls/optional_pinning_ctypes_drain.py says why that name).
"""

from __future__ import annotations

import ctypes
from typing import Any

import torch
import torch.distributed as dist
from chunked_pins import pin_chunks, teardown, unpin_all

__all__ = ["register_fallback", "register_raise", "teardown"]


def _agree(ok: bool) -> bool:
    flag = torch.tensor([1 if ok else 0], dtype=torch.int32)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return bool(flag.item())


def register_raise(cudart: Any, ptr: int, nbytes: int, *, granularity: int | None,
                   chunk_limit: int) -> list[tuple[int, int]]:
    done, rc = pin_chunks(cudart, ptr, nbytes, granularity, chunk_limit)
    if _agree(rc == 0):
        return done
    unpin_all(cudart, done)
    if rc:
        raise RuntimeError(f"cudaHostRegister failed with {rc} on rank {dist.get_rank()}")
    raise RuntimeError("another rank could not pin its pool: rolled back on every rank")


def register_fallback(cudart: Any, ptr: int, nbytes: int, *, granularity: int | None,
                      chunk_limit: int) -> list[tuple[int, int]]:
    done, rc = pin_chunks(cudart, ptr, nbytes, granularity, chunk_limit)
    if _agree(rc == 0):
        return done
    unpin_all(cudart, done)
    if rc:
        lib = ctypes.CDLL("libcudart.so.13")
        lib.cudaGetLastError.restype = ctypes.c_int
        lib.cudaGetLastError()
    return []
