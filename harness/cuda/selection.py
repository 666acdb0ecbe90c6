"""Which page extents the copy step sends through ``cudaMemcpyBatchAsync``, and why that suffices.

The runtime's copy rule (docs/cuda-runtime.md §5.1, §5.4) judges a host range only by how the
registrations cover it, so the pages that decide are those of
harness/pools/deciding_pages.py: every extent of a small pool (the walk is cheap and the most
direct evidence); above ``COPY_ALL_BELOW`` extents, per extent family, the pages at the
registration edges, the first and last page and a seeded sample, copied in row order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kvreg.harness.pools import PoolGeometry
from kvreg.harness.pools.base import Int64Array
from kvreg.harness.pools.deciding_pages import (
    COPY_ALL_BELOW,
    SAMPLE,
    edge_pages,
    walks_every_page,
)
from kvreg.harness.pools.families import row_count

__all__ = ["BATCH", "CopyOutcome", "CopySelection", "copy_selected", "select_copies"]

BATCH = 1 << 18           # descriptors per call (bounds the validation temporaries)

EVERY_PAGE = "every page"
EDGES_AND_SAMPLE = ("pages touching a seam or registration edge, one page per gap between "
                    "edges, first and last page of each buffer, and a seeded sample; the rest "
                    "lie strictly inside a gap whose copied page has the same registration "
                    "cover")


@dataclass(frozen=True)
class CopySelection:
    """Extents to copy, in page-meta row order, and how the others are accounted for."""

    rows: Int64Array       # global page-meta rows
    buffer: Int64Array
    offset: Int64Array
    size: Int64Array
    total: int             # rows of the pool's page meta
    method: str

    def __len__(self) -> int:
        return len(self.rows)

    def as_dict(self) -> dict[str, object]:
        return {"pages_copied": len(self.rows), "pages_total": self.total,
                "method": self.method}


def select_copies(geometry: PoolGeometry, edges: Sequence[Int64Array], *, seed: int = 0,
                  copy_all_below: int = COPY_ALL_BELOW, sample: int = SAMPLE) -> CopySelection:
    """The extents to copy; ``edges[i]`` are buffer i's edges (deciding_pages.buffer_edges)."""
    fams = [f for f in geometry.extent_families() if f.count]
    total = row_count(fams)
    if walks_every_page(fams, copy_all_below):
        ext = geometry.page_extents()
        rows = np.arange(len(ext), dtype=np.int64)
        return CopySelection(rows, ext.buffer, ext.offset, ext.size, total, EVERY_PAGE)
    parts = []
    for f, (at_edges, anchors) in zip(fams, edge_pages(fams, edges, seed=seed, sample=sample),
                                      strict=True):
        pages = np.union1d(at_edges, anchors)
        parts.append((f.row_start + pages * f.row_step, np.full(len(pages), f.buffer),
                      f.base + pages * f.stride, np.full(len(pages), f.size)))
    rows = np.concatenate([p[0] for p in parts]).astype(np.int64)
    order = np.argsort(rows, kind="stable")
    return CopySelection(
        rows[order],
        np.concatenate([p[1] for p in parts]).astype(np.int64)[order],
        np.concatenate([p[2] for p in parts]).astype(np.int64)[order],
        np.concatenate([p[3] for p in parts]).astype(np.int64)[order],
        total, EDGES_AND_SAMPLE)


@dataclass
class CopyOutcome:
    code: int
    copies: int
    failed_row: int | None    # page-meta row of the first failing extent, when known
    detail: str


def copy_selected(runtime: Any, selection: CopySelection, bases: Sequence[int], *,
                  direction: str = "h2d",
                  fault_detail: Callable[[], Any] | None = None) -> CopyOutcome:
    """Send the selected extents through ``cudaMemcpyBatchAsync`` (one descriptor each, to a
    device staging buffer, on a non-default stream with srcAccessOrder Stream); stop at the
    first failing batch. ``runtime`` is a cuda.bindings.runtime-style module."""
    out = CopyOutcome(0, 0, None, "")
    if not len(selection):
        out.detail = "no pages"
        return out
    base = np.array([int(b) for b in bases], dtype=np.uint64)
    host = base[selection.buffer] + selection.offset.astype(np.uint64)
    sizes = selection.size
    err, dev = runtime.cudaMalloc(int(sizes.max()))
    if int(err):
        return CopyOutcome(int(err), 0, None, "cudaMalloc of the staging buffer failed")
    err, stream = runtime.cudaStreamCreate()
    attrs = runtime.cudaMemcpyAttributes()
    attrs.srcAccessOrder = runtime.cudaMemcpySrcAccessOrder.cudaMemcpySrcAccessOrderStream
    try:
        for start in range(0, len(host), BATCH):
            h = host[start:start + BATCH]
            n = len(h)
            d = np.full(n, dev, dtype=np.uint64)
            srcs, dsts = (h, d) if direction == "h2d" else (d, h)
            res = runtime.cudaMemcpyBatchAsync(dsts, srcs, sizes[start:start + n], n, [attrs],
                                               [0], 1, stream)
            code = int(res[0])
            out.copies += n
            if code:
                detail = fault_detail() if fault_detail is not None else None
                index = getattr(detail, "index", None)
                out.code = code
                if isinstance(index, int) and 0 <= index < n:
                    out.failed_row = int(selection.rows[start + index])
                out.detail = detail.describe() if detail is not None else ""
                break
        (sync,) = runtime.cudaStreamSynchronize(stream)
        if int(sync) and not out.code:
            out.code = int(sync)
            out.detail = "the stream reported an asynchronous error"
    finally:
        runtime.cudaStreamDestroy(stream)
        runtime.cudaFree(dev)
    return out
