"""BROKEN: register pins only its first chunk and returns, as if the loop ran once.

Every page of the first chunk copies on the pinned path, every later page on the pageable
path; no call fails. Expected rule: registered (the first gap starts where chunk 2 would).
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
    if g is not None and (g <= 0 or g > limit):
        raise ValueError(f"granularity {g} must be positive and at most {limit}")
    chunk = total if g is None else (limit // g) * g
    done: list[tuple[int, int]] = []
    if total:
        size = min(chunk, total)                 # the bug: only the first chunk
        rc = int(cudart.cudaHostRegister(base, size, 0))
        if rc:
            raise RuntimeError(f"cudaHostRegister failed (rc={rc}) at offset=0 size={size}")
        done.append((base, size))
    setattr(buffer, ATTR, done)


def teardown(buffer: Any) -> None:
    cudart = torch.cuda.cudart()
    for ptr, _ in reversed(getattr(buffer, ATTR, [])):
        cudart.cudaHostUnregister(ptr)
    setattr(buffer, ATTR, [])
