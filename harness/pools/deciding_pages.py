"""Which pages of a large pool decide a verdict that depends only on how registrations cover
each page extent: the selection both targets' copy steps share (harness/cuda/selection.py:
cudaMemcpyBatchAsync; harness/mooncake/selection.py: store put/get and RDMA writes).

A copy rule that judges a host range only by the registrations (CUDA's: wholly pinned,
wholly pageable, partly both, or over two, docs/cuda-runtime.md §5.1, §5.4; Mooncake's: a
slice inside one registered buffer, an SGE inside one MR, docs/mooncake-verbs.md §1.7, §5.3)
gives every extent between two consecutive registration edges of its buffer the same
verdict. So above ``COPY_ALL_BELOW`` page-meta rows the pages worth moving are, per extent
family: the pages that touch an edge (seams, registration bases and ends, buffer ends; the
first page after each edge is the gap's representative), the first and last page, and a
seeded sample of the rest. The first failing page in row order is then the one a full walk
would find: a failing page not moved shares its gap with a moved one of a lower row. Below
the threshold, or where an extent is longer than its stride (the gap argument needs it
not to be), every page is walked.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from .base import ExtentFamily, Int64Array
from .families import row_count, touching_pages

__all__ = ["COPY_ALL_BELOW", "SAMPLE", "buffer_edges", "edge_pages", "walks_every_page"]

COPY_ALL_BELOW = 1 << 18   # page-meta rows: at or below this, every page is walked
SAMPLE = 512               # extra pages drawn at random (seeded) above the threshold


def buffer_edges(base: int, nbytes: int, registrations: Iterable[tuple[int, int]]) -> Int64Array:
    """Offsets (from the buffer base) where the registration cover of the buffer may change:
    the buffer's ends and every registration base and end that falls inside it."""
    cuts = {0, nbytes}
    for ptr, size in registrations:
        for edge in (ptr - base, ptr + size - base):
            if 0 < edge < nbytes:
                cuts.add(edge)
    return np.array(sorted(cuts), dtype=np.int64)


def walks_every_page(families: Sequence[ExtentFamily], copy_all_below: int) -> bool:
    """Whether every page is walked: a small pool, or an extent longer than its stride."""
    return (row_count(families) <= copy_all_below
            or any(f.size > f.stride for f in families))


def edge_pages(families: Sequence[ExtentFamily], edges: Sequence[Int64Array], *, seed: int,
               sample: int) -> list[tuple[Int64Array, Int64Array]]:
    """Per family (pages ``p`` of ``range(f.count)``): the pages next to the edges inside it
    (``edges[f.buffer]``, see :func:`buffer_edges`), and its anchors: the first and last page
    and a seeded sample (``sample`` pages over all families, at least one each)."""
    rng = np.random.default_rng(seed)
    per_family = max(1, sample // len(families)) if sample and families else 0
    out = []
    for f in families:
        e = edges[f.buffer]
        inside = e[(e >= f.base) & (e <= f.span_end)]
        anchors = [np.array([0, f.count - 1], dtype=np.int64)]
        if per_family:
            anchors.append(rng.integers(0, f.count, size=min(per_family, f.count),
                                        dtype=np.int64))
        out.append((touching_pages(f, inside), np.unique(np.concatenate(anchors))))
    return out
