"""BROKEN: a granularity above the chunk limit is not rejected; the code registers one page
per call instead (each call above the limit) rather than raising ValueError.

Expected rule: not-rejected.
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
    # the bug: no `if g > limit: raise ValueError`; at least one page per chunk
    chunk = total if g is None else max(limit // g, 1) * g
    done: list[tuple[int, int]] = []
    off = 0
    while off < total:
        size = min(chunk, total - off)
        rc = int(cudart.cudaHostRegister(base + off, size, 0))
        if rc:
            for ptr, _ in reversed(done):
                cudart.cudaHostUnregister(ptr)
            raise RuntimeError(f"cudaHostRegister failed (rc={rc}) at offset={off}")
        done.append((base + off, size))
        off += size
    setattr(buffer, ATTR, done)


def teardown(buffer: Any) -> None:
    cudart = torch.cuda.cudart()
    for ptr, _ in reversed(getattr(buffer, ATTR, [])):
        cudart.cudaHostUnregister(ptr)
    setattr(buffer, ATTR, [])
