"""CORRECT variant (sglang style): a failed chunk is retried in smaller pieces on multiples
of the granularity (the approach of SGLang PR #39744, done right).

Each failed range is split in two on a granularity multiple and retried, up to a bounded
number of attempts; when it cannot be split further or the attempts run out, every chunk is
rolled back in reverse and the error is raised with its code and string. Ends fully
registered on aligned seams, or with nothing registered and an exception.
"""

from __future__ import annotations

import os
from typing import Any

import torch

ATTR = "_recovering_ranges"
MAX_FAILURES = 8


def _release(cudart: Any, ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    failed = [(p, s) for p, s in reversed(ranges) if int(cudart.cudaHostUnregister(p)) != 0]
    failed.reverse()
    return failed


def register(buffer: Any, registration_granularity_bytes: int | None = None) -> None:
    cudart = torch.cuda.cudart()
    base = buffer.data_ptr()
    total = buffer.numel() * buffer.element_size()
    limit = max(int(os.environ.get("SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB", "256")), 1) << 30
    g = registration_granularity_bytes
    if g is not None and (g <= 0 or g > limit):
        raise ValueError(f"registration_granularity_bytes={g} must be in (0, {limit}]")
    unit = g or total or 1
    chunk = total if g is None else (limit // g) * g
    todo = [(off, min(chunk, total - off)) for off in range(0, total, chunk or 1)]
    todo.reverse()                                   # a stack, first chunk on top
    done: list[tuple[int, int]] = []
    failures = 0
    while todo:
        off, size = todo.pop()
        rc = cudart.cudaHostRegister(base + off, size, 0)
        if int(rc) == 0:
            done.append((base + off, size))
            continue
        failures += 1
        units = size // unit
        if failures > MAX_FAILURES or units < 2:
            text = cudart.cudaGetErrorString(rc)     # the enum object, as torch wants
            left = _release(cudart, done)
            setattr(buffer, ATTR, left)
            raise RuntimeError(f"cudaHostRegister failed (rc={int(rc)}, {text}) at offset={off} "
                               f"size={size} after {failures} failed call(s)"
                               + (f"; could not release {left}" if left else ""))
        half = (units // 2) * unit
        todo += [(off + half, size - half), (off, half)]
    done.sort()
    setattr(buffer, ATTR, done)


def teardown(buffer: Any) -> None:
    cudart = torch.cuda.cudart()
    setattr(buffer, ATTR, _release(cudart, getattr(buffer, ATTR, [])))
