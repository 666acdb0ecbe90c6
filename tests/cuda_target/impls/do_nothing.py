"""BROKEN: register validates its arguments and returns without pinning anything.

A pageable copy is legal, so the transfer step cannot notice; only the end state shows it.
Expected rule: registered ("registered none of its N bytes").
"""

from __future__ import annotations

import os
from typing import Any

import torch

ATTR = "_broken_ranges"


def register(buffer: Any, registration_granularity_bytes: int | None = None) -> None:
    torch.cuda.cudart()
    limit = int(os.environ.get("SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB", "256")) << 30
    g = registration_granularity_bytes
    if g is not None and (g <= 0 or g > limit):
        raise ValueError(f"granularity {g} must be positive and at most {limit}")
    setattr(buffer, ATTR, [])                    # the bug: nothing registered


def teardown(buffer: Any) -> None:
    cudart = torch.cuda.cudart()
    for ptr, _ in reversed(getattr(buffer, ATTR, [])):
        cudart.cudaHostUnregister(ptr)
    setattr(buffer, ATTR, [])
