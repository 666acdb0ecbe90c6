"""Transfers over every page through the batch copy API, as HiCache's write-back does.

One ``cudaMemcpyBatchAsync`` descriptor per page extent (pools.md §5.1: whole pages; §5.2:
per-(page, layer) sub-blocks are inside those), host to a device staging buffer, on a
non-default stream with srcAccessOrder Stream. The fake's verdict for the first bad
descriptor says which page and which registrations it spans.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from kvreg.harness.pools import PoolGeometry

__all__ = ["TransferResult", "copy_every_page"]

BATCH = 1 << 18   # descriptors per call (bounds the validation temporaries)


@dataclass
class TransferResult:
    code: int
    copies: int
    failed_row: int | None    # row of the pool's page extents that failed, when known
    detail: str

    @property
    def ok(self) -> bool:
        return self.code == 0


def copy_every_page(runtime: Any, geometry: PoolGeometry, buffers: list[Any], *,
                    direction: str = "h2d", fault_detail: Any = None) -> TransferResult:
    """Copy every page extent between the host pool and a device buffer.

    ``runtime`` is a cuda.bindings.runtime-style module (fake or real). ``fault_detail`` is
    an optional callable returning the fake's last copy fault description.
    """
    if not geometry.has_page_meta:
        return TransferResult(0, 0, None, "no page metadata: nothing to copy")
    ext = geometry.page_extents()
    if not len(ext):
        return TransferResult(0, 0, None, "no pages")
    bases = np.array([int(b.data_ptr()) for b in buffers], dtype=np.uint64)
    host = bases[ext.buffer] + ext.offset.astype(np.uint64)
    sizes = ext.size.astype(np.int64)
    err, dev = runtime.cudaMalloc(int(sizes.max()))
    if int(err):
        return TransferResult(int(err), 0, None, "cudaMalloc of the staging buffer failed")
    err, stream = runtime.cudaStreamCreate()
    attrs = runtime.cudaMemcpyAttributes()
    attrs.srcAccessOrder = runtime.cudaMemcpySrcAccessOrder.cudaMemcpySrcAccessOrderStream
    result = TransferResult(0, 0, None, "")
    try:
        for start in range(0, len(host), BATCH):
            h = host[start:start + BATCH]
            n = len(h)
            d = np.full(n, dev, dtype=np.uint64)
            srcs, dsts = (h, d) if direction == "h2d" else (d, h)
            res = runtime.cudaMemcpyBatchAsync(dsts, srcs, sizes[start:start + n], n, [attrs],
                                               [0], 1, stream)
            code = int(res[0])
            result.copies += n
            if code:
                detail = fault_detail() if fault_detail is not None else None
                row = getattr(detail, "index", None)
                result.code = code
                result.failed_row = start + row if isinstance(row, int) and row >= 0 else None
                result.detail = detail.describe() if detail is not None else ""
                break
        (sync,) = runtime.cudaStreamSynchronize(stream)
        if int(sync) and not result.code:
            result.code = int(sync)
            result.detail = "the stream reported an asynchronous error"
    finally:
        runtime.cudaStreamDestroy(stream)
        runtime.cudaFree(dev)
    return result
