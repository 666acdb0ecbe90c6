"""BROKEN: teardown refuses to run twice (a pool destroyed by both ``__del__`` and an
explicit shutdown raises on the second call).

Expected rule: teardown-raised ("teardown #2 ... raised RuntimeError").
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
        rc = int(cudart.cudaHostRegister(base + off, size, 0))
        if rc:
            for ptr, _ in reversed(done):
                cudart.cudaHostUnregister(ptr)
            raise RuntimeError(f"cudaHostRegister failed (rc={rc}) at offset={off}")
        done.append((base + off, size))
        off += size
    setattr(buffer, ATTR, done)


def teardown(buffer: Any) -> None:
    ranges = getattr(buffer, ATTR, None)
    if ranges is None:                            # the bug: a second teardown is an error
        raise RuntimeError("host pool was already torn down")
    cudart = torch.cuda.cudart()
    for ptr, _ in reversed(ranges):
        cudart.cudaHostUnregister(ptr)
    delattr(buffer, ATTR)
