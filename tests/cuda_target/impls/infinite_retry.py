"""BROKEN: a failed cudaHostRegister is retried until it succeeds. A failure that never
goes away (one call above the 512 GiB per-call ceiling of R580+ drivers) loops forever.

Expected rule: call-budget (the runner stops the loop).
"""

from __future__ import annotations

import os
from typing import Any

import torch

ATTR = "_broken_ranges"


def register(buffer: Any, registration_granularity_bytes: int | None = None) -> None:
    cudart = torch.cuda.cudart()
    base = buffer.data_ptr()
    total = buffer.numel() * buffer.element_size()
    limit = int(os.environ.get("SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB", "256")) << 30
    g = registration_granularity_bytes
    if g is not None and g > limit:
        raise ValueError(f"granularity {g} exceeds the chunk limit {limit}")
    chunk = total if g is None else (limit // g) * g
    done: list[tuple[int, int]] = []
    off = 0
    while off < total:
        size = min(chunk, total - off)
        while int(cudart.cudaHostRegister(base + off, size, 0)):   # the bug: retry forever
            pass
        done.append((base + off, size))
        off += size
    setattr(buffer, ATTR, done)


def teardown(buffer: Any) -> None:
    cudart = torch.cuda.cudart()
    for ptr, _ in reversed(getattr(buffer, ATTR, [])):
        cudart.cudaHostUnregister(ptr)
    setattr(buffer, ATTR, [])
