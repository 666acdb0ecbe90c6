"""BROKEN: the granularity is validated inside the loop, after the first page has already
been registered; the page is rolled back and ValueError raised, but too late.

Expected rule: rejected-too-late.
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
        if g is not None and g > limit:            # the bug: checked after the first call
            for ptr, _ in reversed(done):
                cudart.cudaHostUnregister(ptr)
            raise ValueError(f"granularity {g} exceeds the chunk limit {limit}")
        off += size
    setattr(buffer, ATTR, done)


def teardown(buffer: Any) -> None:
    cudart = torch.cuda.cudart()
    for ptr, _ in reversed(getattr(buffer, ATTR, [])):
        cudart.cudaHostUnregister(ptr)
    setattr(buffer, ATTR, [])
