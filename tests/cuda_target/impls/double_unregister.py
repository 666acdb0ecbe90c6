"""BROKEN: teardown never forgets what it released, so a second teardown unregisters every
chunk base again (cudaHostUnregister returns 713). Failures are logged, not raised.

Expected rule: unregister-not-a-live-base ("which was already released").
"""

from __future__ import annotations

import logging
import os
from typing import Any

import torch

ATTR = "_broken_ranges"
log = logging.getLogger("kvreg_tests.double_unregister")


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
    cudart = torch.cuda.cudart()
    for ptr, _ in reversed(getattr(buffer, ATTR, [])):   # the bug: the list is never cleared
        rc = int(cudart.cudaHostUnregister(ptr))
        if rc:
            log.warning("cudaHostUnregister(%#x) failed with rc=%d", ptr, rc)
