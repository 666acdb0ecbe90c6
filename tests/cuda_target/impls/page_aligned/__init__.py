"""The correct registration the teardown-bug implementations next to it share (as SGLang's
since PR #36798): chunks of whole granules under ``SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB``,
the earlier ones rolled back and an error raised when a chunk fails. What each of those
implementations gets wrong is in its own file, its teardown."""

from __future__ import annotations

import os
from typing import Any

import torch


def register_chunks(buffer: Any, granularity: int | None, attr: str) -> None:
    """Register ``buffer`` in page-aligned chunks and keep ``[(ptr, size)]`` as ``attr``."""
    cudart = torch.cuda.cudart()
    base = buffer.data_ptr()
    total = buffer.numel() * buffer.element_size()
    limit = int(os.environ.get("SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB", "256")) << 30
    g = granularity
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
    setattr(buffer, attr, done)
