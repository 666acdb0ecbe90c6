"""BROKEN (SGLang's current error path): the failing code is formatted with
``cudart.cudaGetErrorString(int(rc))``; torch's binding accepts only its cudaError enum
(spec/cuda-runtime.md §7), so a TypeError replaces the CUDA error. Rollback already
happened, so nothing else looks wrong. Expected rule: error-reported.
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
    limit = max(int(os.environ.get("SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB", "256")), 1) << 30
    g = registration_granularity_bytes
    if g is not None and (g <= 0 or g > limit):
        raise ValueError(f"granularity {g} must be positive and at most {limit}")
    chunk = total if g is None else (limit // g) * g
    done: list[tuple[int, int]] = []
    off = 0
    while off < total:
        size = min(chunk, total - off)
        rc = cudart.cudaHostRegister(base + off, size, 0)
        if int(rc) != 0:
            for ptr, _ in reversed(done):
                cudart.cudaHostUnregister(ptr)
            errstr = cudart.cudaGetErrorString(int(rc))   # the bug: TypeError on torch
            raise RuntimeError(f"cudaHostRegister failed ({errstr}) at offset={off}")
        done.append((base + off, size))
        off += size
    setattr(buffer, ATTR, done)


def teardown(buffer: Any) -> None:
    cudart = torch.cuda.cudart()
    for ptr, _ in reversed(getattr(buffer, ATTR, [])):
        cudart.cudaHostUnregister(ptr)
    setattr(buffer, ATTR, [])
