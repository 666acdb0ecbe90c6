"""BROKEN: teardown refuses to run twice (a pool destroyed by both ``__del__`` and an
explicit shutdown raises on the second call).

Expected rule: teardown-raised ("teardown #2 ... raised RuntimeError").
"""

from __future__ import annotations

from typing import Any

import torch
from page_aligned import register_chunks

ATTR = "_broken_ranges"


def register(buffer: Any, registration_granularity_bytes: int | None = None) -> None:
    """Correct, as SGLang's (page_aligned/): the bug is in teardown."""
    register_chunks(buffer, registration_granularity_bytes, ATTR)


def teardown(buffer: Any) -> None:
    ranges = getattr(buffer, ATTR, None)
    if ranges is None:                            # the bug: a second teardown is an error
        raise RuntimeError("host pool was already torn down")
    cudart = torch.cuda.cudart()
    for ptr, _ in reversed(ranges):
        cudart.cudaHostUnregister(ptr)
    delattr(buffer, ATTR)
