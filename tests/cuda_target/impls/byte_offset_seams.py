"""BROKEN (pre-#36798 SGLang): chunks of exactly the limit in bytes, ignoring the granularity.

Seams land every SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB bytes, inside a copy page whenever
the page size does not divide the limit; cudaMemcpyBatchAsync then fails for that page.
Rollback and teardown are correct. Expected rule: transfer-failed.
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
    done: list[tuple[int, int]] = []
    for off in range(0, total, limit):           # the bug: byte seams, granularity unused
        size = min(limit, total - off)
        rc = int(cudart.cudaHostRegister(base + off, size, 0))
        if rc:
            for ptr, _ in reversed(done):
                cudart.cudaHostUnregister(ptr)
            raise RuntimeError(f"cudaHostRegister failed (rc={rc}) at offset={off}")
        done.append((base + off, size))
    setattr(buffer, ATTR, done)


def teardown(buffer: Any) -> None:
    cudart = torch.cuda.cudart()
    for ptr, _ in reversed(getattr(buffer, ATTR, [])):
        cudart.cudaHostUnregister(ptr)
    setattr(buffer, ATTR, [])
