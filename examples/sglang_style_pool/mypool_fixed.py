"""The same pool code with the PR #36798 fix: seams on multiples of the copy granularity."""

from __future__ import annotations

from typing import Any

import torch
from mypool import RANGES, _limit, teardown  # noqa: F401  (teardown is unchanged)


def register(buffer: Any, registration_granularity_bytes: int | None = None) -> None:
    cudart = torch.cuda.cudart()
    base, total = buffer.data_ptr(), buffer.numel() * buffer.element_size()
    g = registration_granularity_bytes
    if g is not None and (g <= 0 or g > _limit()):
        raise ValueError(f"bad registration granularity {g} for limit {_limit()}")
    chunk = (_limit() // g) * g if g else _limit()
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
