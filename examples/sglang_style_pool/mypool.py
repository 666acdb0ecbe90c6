"""A downstream project's host KV pool registration, written in SGLang's style.

It has one planted bug, the one SGLang fixed in PR #36798: the chunk size ignores the copy
granularity, so a chunk seam can cut a page in two. kvreg's scenarios catch it.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import torch

log = logging.getLogger(__name__)
RANGES = "_mypool_registered_ranges"


def _limit() -> int:
    # unset or empty: SGLang's default 256 GiB; 0: 1 GiB (SGLang floors the value at 1)
    return max(int(os.environ.get("SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB") or 256), 1) << 30


def register(buffer: Any, registration_granularity_bytes: int | None = None) -> None:
    """Pin ``buffer`` in chunks of at most the configured limit, all or nothing."""
    cudart = torch.cuda.cudart()
    base, total = buffer.data_ptr(), buffer.numel() * buffer.element_size()
    g = registration_granularity_bytes
    if g is not None and (g <= 0 or g > _limit()):
        raise ValueError(f"bad registration granularity {g} for limit {_limit()}")
    chunk = _limit()          # BUG: should be (_limit() // g) * g when g is given
    done: list[tuple[int, int]] = []
    for off in range(0, total, chunk):
        size = min(chunk, total - off)
        rc = int(cudart.cudaHostRegister(base + off, size, 0))
        if rc != 0:
            for ptr, _ in reversed(done):
                cudart.cudaHostUnregister(ptr)
            raise RuntimeError(f"cudaHostRegister failed (rc={rc}) at offset={off} size={size}")
        done.append((base + off, size))
    setattr(buffer, RANGES, done)


def teardown(buffer: Any) -> None:
    """Unregister every chunk once; keep the ones that failed for a retry."""
    cudart = torch.cuda.cudart()
    failed = []
    for ptr, size in reversed(getattr(buffer, RANGES, [])):
        rc = int(cudart.cudaHostUnregister(ptr))
        if rc != 0:
            log.warning("cudaHostUnregister failed (rc=%d) for ptr=%#x", rc, ptr)
            failed.append((ptr, size))
    setattr(buffer, RANGES, list(reversed(failed)))
