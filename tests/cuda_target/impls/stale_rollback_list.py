"""BROKEN (sglang style): a rollback that swallows its own unregister failure and leaves the
chunk list stale.

The chunk list lives on the buffer from the first call and grows as chunks register. When a
chunk fails, the rollback unregisters every earlier chunk and ignores a failing unregister;
only when every unregister succeeded does it empty the list. After a failed unregister the
list still names every chunk, the released ones too, so a teardown after the failed register
(a pool destroy in a ``finally``) unregisters released chunks: 713
cudaErrorHostMemoryNotRegistered (docs/cuda-runtime.md §3). Expected rule:
unregister-not-a-live-base, only where a rollback unregister fails and teardown follows.
"""

from __future__ import annotations

import os
from typing import Any

import torch

ATTR = "_stale_rollback_ranges"


def register(buffer: Any, registration_granularity_bytes: int | None = None) -> None:
    cudart = torch.cuda.cudart()
    base = buffer.data_ptr()
    total = buffer.numel() * buffer.element_size()
    limit = max(int(os.environ.get("SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB", "256")), 1) << 30
    g = registration_granularity_bytes
    if g is not None and (g <= 0 or g > limit):
        raise ValueError(f"registration_granularity_bytes={g} must be in (0, {limit}]")
    chunk = total if g is None else (limit // g) * g
    chunks: list[tuple[int, int]] = []
    setattr(buffer, ATTR, chunks)
    for off in range(0, total, chunk or 1):
        size = min(chunk, total - off)
        rc = int(cudart.cudaHostRegister(base + off, size, 0))
        if rc != 0:
            clean = True
            for ptr, _ in reversed(chunks):
                clean = int(cudart.cudaHostUnregister(ptr)) == 0 and clean
            if clean:
                chunks.clear()
            raise RuntimeError(f"cudaHostRegister failed (rc={rc}, "
                               f"{cudart.cudaGetErrorString(cudart.cudaError(rc))}) at "
                               f"offset={off} size={size}")
        chunks.append((base + off, size))


def teardown(buffer: Any) -> None:
    cudart = torch.cuda.cudart()
    chunks = getattr(buffer, ATTR, [])
    chunks[:] = [(p, s) for p, s in reversed(chunks) if int(cudart.cudaHostUnregister(p))][::-1]
