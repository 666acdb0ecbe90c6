"""BROKEN: over-strict validation that refuses any granularity that does not divide the
chunk limit, although SGLang only requires it to be positive and not above the limit
(chunk = floor(LIM / G) * G). Every real page size (4.5 MiB MLA pages, ...) is refused.

Expected rule: unexpected-error (a valid pool fails to register).
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
    if g is not None and (g > limit or limit % g):   # the bug: `limit % g` is not an error
        raise ValueError(f"registration granularity {g} must divide the chunk limit {limit}")
    chunk = total if g is None else (limit // g) * g
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
