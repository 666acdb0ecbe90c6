"""Which page extents the copy step sends through ``cudaMemcpyBatchAsync``, and why that suffices.

The runtime's copy rule (docs/cuda-runtime.md §5.1, §5.4) judges a host range only by how the
registrations cover it: wholly inside one registration, wholly pageable, partly both, or spread
over two. Between two consecutive registration edges of a buffer that cover is the same
everywhere, so every extent that lies strictly between two edges gets the verdict of any other
extent of the same gap. Small pools copy every extent (the walk is cheap and the most direct
evidence); above ``COPY_ALL_BELOW`` extents the step copies, per extent family: the pages that
touch an edge (seams, registration bases and ends, buffer ends), the first page after each edge
(the gap's representative), the first and last page, and a seeded sample of the rest. The first
failing extent in row order is then the same one a full walk would find: a failing extent that
was not copied shares its gap with a copied representative of a lower row.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kvreg.harness.pools import PoolGeometry
from kvreg.harness.pools.base import ExtentFamily, Int64Array
from kvreg.harness.pools.families import row_count, touching_pages

__all__ = ["BATCH", "COPY_ALL_BELOW", "SAMPLE", "CopyOutcome", "CopySelection", "buffer_edges",
           "copy_selected", "select_copies"]

COPY_ALL_BELOW = 1 << 18   # extents: at or below this, every one is copied
BATCH = 1 << 18           # descriptors per call (bounds the validation temporaries)
SAMPLE = 512               # extra extents drawn at random (seeded) above the threshold

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


def buffer_edges(base: int, nbytes: int, registrations: Iterable[tuple[int, int]]) -> Int64Array:
    """Offsets (from the buffer base) where the registration cover of the buffer may change:
    the buffer's ends and every registration base and end that falls inside it."""
    cuts = {0, nbytes}
    for ptr, size in registrations:
        for edge in (ptr - base, ptr + size - base):
            if 0 < edge < nbytes:
                cuts.add(edge)
    return np.array(sorted(cuts), dtype=np.int64)


def _family_pages(f: ExtentFamily, edges: Int64Array, rng: np.random.Generator,
                  sample: int) -> Int64Array:
    inside = edges[(edges >= f.base) & (edges <= f.span_end)]
    picks = [touching_pages(f, inside), np.array([0, f.count - 1], dtype=np.int64)]
    if sample:
        picks.append(rng.integers(0, f.count, size=min(sample, f.count), dtype=np.int64))
    return np.unique(np.concatenate(picks))


def select_copies(geometry: PoolGeometry, edges: Sequence[Int64Array], *, seed: int = 0,
                  copy_all_below: int = COPY_ALL_BELOW, sample: int = SAMPLE) -> CopySelection:
    """The extents to copy; ``edges[i]`` are buffer i's edges (see buffer_edges)."""
    fams = [f for f in geometry.extent_families() if f.count]
    total = row_count(fams)
    # the gap argument needs extents no longer than their stride (true of every bundled pool)
    if total <= copy_all_below or any(f.size > f.stride for f in fams):
        ext = geometry.page_extents()
        rows = np.arange(len(ext), dtype=np.int64)
        return CopySelection(rows, ext.buffer, ext.offset, ext.size, total, EVERY_PAGE)
    rng = np.random.default_rng(seed)
    per_family = max(1, sample // len(fams)) if sample else 0
    parts = []
    for f in fams:
        pages = _family_pages(f, edges[f.buffer], rng, per_family)
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
