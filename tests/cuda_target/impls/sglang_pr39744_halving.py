"""SGLang PR #39744's first version (docs/pools.md §1.3), re-implemented from its description:
every chunk capped at the limit (also without a granularity), and a failing chunk halved
down to 4 KiB and retried, seams wherever the halving puts them.

Correct where it matters: it ends fully registered or rolls back and raises. Its seams lie on
4 KiB multiples, not on copy pages, so a halved chunk may cut a page that is copied (the
batch copy of that page then fails), a page no transfer touches (harmless), or a layer slab
between two pages (only a direct-path run across it is at risk).
"""

from __future__ import annotations

import os
from typing import Any

import torch

ATTR = "_pr39744_ranges"
MIN_CHUNK = 4096


def _release(cudart: Any, ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    failed = [(p, s) for p, s in reversed(ranges) if int(cudart.cudaHostUnregister(p)) != 0]
    failed.reverse()
    return failed


def _register_span(cudart: Any, ptr: int, size: int, done: list[tuple[int, int]]) -> int:
    """Register [ptr, ptr+size), halving on failure; 0 or the last error code."""
    rc = int(cudart.cudaHostRegister(ptr, size, 0))
    if rc == 0:
        done.append((ptr, size))
        return 0
    if size <= MIN_CHUNK:
        return rc
    half = (size // 2) // MIN_CHUNK * MIN_CHUNK or MIN_CHUNK
    return _register_span(cudart, ptr, half, done) or \
        _register_span(cudart, ptr + half, size - half, done)


def register(buffer: Any, registration_granularity_bytes: int | None = None) -> None:
    cudart = torch.cuda.cudart()
    base = buffer.data_ptr()
    total = buffer.numel() * buffer.element_size()
    limit = max(int(os.environ.get("SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB", "256")), 1) << 30
    g = registration_granularity_bytes
    if g is not None and (g <= 0 or g > limit):
        raise ValueError(f"registration_granularity_bytes={g} must be in (0, {limit}]")
    chunk = limit if g is None else (limit // g) * g
    done: list[tuple[int, int]] = []
    for off in range(0, total, chunk):
        size = min(chunk, total - off)
        rc = _register_span(cudart, base + off, size, done)
        if rc:
            left = _release(cudart, done)
            setattr(buffer, ATTR, left)
            raise RuntimeError(f"cudaHostRegister failed (rc={rc}, "
                               f"{cudart.cudaGetErrorString(cudart.cudaError(rc))}) at "
                               f"offset={off} size={size}")
    setattr(buffer, ATTR, done)


def teardown(buffer: Any) -> None:
    cudart = torch.cuda.cudart()
    setattr(buffer, ATTR, _release(cudart, getattr(buffer, ATTR, [])))
