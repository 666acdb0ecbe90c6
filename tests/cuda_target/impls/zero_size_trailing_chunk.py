"""BROKEN: an off-by-one loop bound (``off <= total``) registers a zero-byte trailing chunk
when the buffer is an exact multiple of the chunk; cudaHostRegister rejects it with 1.

Expected rule: register-size-zero (then unexpected-error, since register raises).
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
    chunk = max(total, 1) if g is None else (limit // g) * g
    done: list[tuple[int, int]] = []
    off = 0
    while off <= total and total:                # the bug: <= instead of <
        size = min(chunk, total - off)
        rc = int(cudart.cudaHostRegister(base + off, size, 0))
        if rc:
            for ptr, _ in reversed(done):
                cudart.cudaHostUnregister(ptr)
            raise RuntimeError(f"cudaHostRegister failed (rc={rc}) at offset={off} size={size}")
        done.append((base + off, size))
        off += chunk
    setattr(buffer, ATTR, done)


def teardown(buffer: Any) -> None:
    cudart = torch.cuda.cudart()
    for ptr, _ in reversed(getattr(buffer, ATTR, [])):
        cudart.cudaHostUnregister(ptr)
    setattr(buffer, ATTR, [])
