"""A correct implementation that reads its chunk limit once, on its first call, not at
import: ``SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB`` kept in a module global from then on, as
code that reads its configuration lazily does. In one deployment that is right; a worker
that carried the value into a scenario of another limit would register chunks over that
limit (a ``fail`` that is kvreg's doing, not the code's).
"""

from __future__ import annotations

import os
from typing import Any

import torch
from caching import _slab, plan

RANGES = "_kvreg_test_ranges"
_LIMIT: int | None = None


def _chunk_limit() -> int:
    global _LIMIT
    if _LIMIT is None:
        _LIMIT = max(int(os.environ.get("SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB", "256")), 1) << 30
    return _LIMIT


def sglang_register(buffer: Any, granularity: int | None = None) -> None:
    cudart = torch.cuda.cudart()
    limit = _chunk_limit()
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


def sglang_teardown(buffer: Any) -> None:
    cudart = torch.cuda.cudart()
    failed = []
    for ptr, size in reversed(getattr(buffer, RANGES, [])):
        if int(cudart.cudaHostUnregister(ptr)) != 0:
            failed.append((ptr, size))
    setattr(buffer, RANGES, list(reversed(failed)))
    if failed:
        raise RuntimeError(f"cudaHostUnregister failed for {len(failed)} chunk(s)")
