"""CORRECT (SGLang PR #40135): the ranks read the host's available memory once, agree on the
MIN with an all-reduce, and refuse (ValueError, before any call, on every rank) pools that do
not fit together; otherwise each rank pins its pool in chunks and raises on a failure.
psutil reads the fake host's /proc/meminfo unmodified.
"""

from __future__ import annotations

from typing import Any

import psutil  # type: ignore[import-untyped]
import torch
import torch.distributed as dist
from chunked_pins import pin_chunks, teardown, unpin_all

__all__ = ["register", "teardown"]


def register(cudart: Any, ptr: int, nbytes: int, *, granularity: int | None,
             chunk_limit: int) -> list[tuple[int, int]]:
    budget = torch.tensor([psutil.virtual_memory().available], dtype=torch.int64)
    dist.all_reduce(budget, op=dist.ReduceOp.MIN)
    need = nbytes * dist.get_world_size()
    if need > int(budget.item()):
        raise ValueError(f"the ranks' pools need {need} bytes, the host has {int(budget.item())}")
    done, rc = pin_chunks(cudart, ptr, nbytes, granularity, chunk_limit)
    if rc:
        unpin_all(cudart, done)
        raise RuntimeError(f"cudaHostRegister failed with {rc}")
    return done
