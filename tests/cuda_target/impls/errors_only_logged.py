"""BROKEN (pre-#26301 SGLang): a failed cudaHostRegister is only logged, never raised.

The pool then runs unpinned. Expected rule: error-swallowed (the message quotes the log).
"""

from __future__ import annotations

import logging
import os
from typing import Any

import torch

ATTR = "_broken_ranges"
log = logging.getLogger("kvreg_tests.errors_only_logged")


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
            done = []
            log.warning("cudaHostRegister failed with rc=%d at offset=%d; continuing "
                        "without pinned memory", rc, off)
            break                                # the bug: no raise
        done.append((base + off, size))
        off += size
    setattr(buffer, ATTR, done)


def teardown(buffer: Any) -> None:
    cudart = torch.cuda.cudart()
    for ptr, _ in reversed(getattr(buffer, ATTR, [])):
        cudart.cudaHostUnregister(ptr)
    setattr(buffer, ATTR, [])
