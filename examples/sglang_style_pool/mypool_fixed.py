"""The same pool code, fixed: seams never cut a copy page, whatever the pool passes.

Two fixes over ``mypool.py``:

* with a granularity G (page_first layouts), chunks are a whole number of pages:
  ``(limit // G) * G`` — SGLang PR #36798;
* without one (layer_first, page_head, per-layer allocations: upstream registers those in
  one call, which fails at 512 GiB on R580+ drivers), the chunk unit is derived from the
  tensor's own shape: the largest outer-dimension slab (one layer, one page, one head
  group...) that fits the limit. A page of any layout lies inside one such slab, because
  pages are whole index ranges of the inner dimensions, so slab seams never cut a page.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from mypool import RANGES, _limit, teardown  # noqa: F401  (teardown is unchanged)


def slab_granularity(buffer: Any, limit: int) -> int:
    """Bytes of the largest outer-dimension slab of ``buffer`` that fits ``limit``.

    For shape (d0, d1, ..., dk) the slabs are prod(d1..dk), prod(d2..dk), ... elements;
    the first that fits wins. A slab smaller than one element cannot happen: the last
    candidate is one element.
    """
    shape = [int(d) for d in buffer.shape]
    item = int(buffer.element_size())
    for depth in range(1, len(shape) + 1):
        slab = math.prod(shape[depth:]) * item
        if slab <= limit:
            return slab
    return item


def register(buffer: Any, registration_granularity_bytes: int | None = None) -> None:
    cudart = torch.cuda.cudart()
    base, total = buffer.data_ptr(), buffer.numel() * buffer.element_size()
    g = registration_granularity_bytes
    if g is not None and (g <= 0 or g > _limit()):
        raise ValueError(f"bad registration granularity {g} for limit {_limit()}")
    if g is None:
        g = slab_granularity(buffer, _limit())
    chunk = (_limit() // g) * g
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
