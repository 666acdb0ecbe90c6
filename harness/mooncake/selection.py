"""Which pages the Mooncake I/O steps move (store put/get, PD writes), and why that suffices.

The store needs each slice inside one registered buffer (docs/mooncake-verbs.md §1.7) and the
NIC each SGE inside one MR (§5.3): a page's fate depends only on how the MRs of its node cover
its extents. Between two consecutive MR edges of a buffer that cover is the same everywhere,
so every page lying strictly between two edges fails or passes like any other page of the
same gap. Small pools are walked page by page (the most direct evidence: a virtual pool sends
the pages not inside one MR, a real one every page); above ``COPY_ALL_BELOW`` page-meta rows
the selection is the pages that decide of harness/pools/deciding_pages.py: every page
touching an MR edge (seams, MR bases and ends, buffer ends), the first page of each gap
between edges, the first and last page of every family and a seeded sample. The lowest
failing page of each family is then selected, so the first failure in call order is the
one moving every page would find.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from kvreg.harness.pools import PoolGeometry
from kvreg.harness.pools.base import ExtentFamily
from kvreg.harness.pools.deciding_pages import (
    COPY_ALL_BELOW,
    SAMPLE,
    buffer_edges,
    edge_pages,
    walks_every_page,
)

if TYPE_CHECKING:   # transfers.py calls select_pages: types only from there
    from .transfers import MrRange, PoolBuffer

Int64s = npt.NDArray[np.int64]

__all__ = ["EDGES_AND_SAMPLE", "EDGES_OUTSIDE_ONE_MR", "EVERY_PAGE", "OUTSIDE_ONE_MR",
           "PageSelection", "buffer_mr_edges", "family_object_stride", "select_pages"]

EVERY_PAGE = "every page"
OUTSIDE_ONE_MR = ("every page checked against the MRs; sent: the pages not inside one MR, "
                  "and the first and last page")
EDGES_AND_SAMPLE = ("pages touching an MR seam or edge, one page per gap between edges, first "
                    "and last page of each buffer, and a seeded sample; the rest lie strictly "
                    "inside a gap whose sent page has the same MR cover")
EDGES_OUTSIDE_ONE_MR = ("of the pages touching an MR seam or edge or opening a gap between "
                        "edges, those not inside one MR; the first and last page of each "
                        "buffer, and a seeded sample; a page inside one MR moves on every "
                        "transfer path, and the rest lie strictly inside a gap whose page has "
                        "the same MR cover")
_RESIDUE_CHUNK = 1 << 20    # pages per step of the object-stride residue walk


@dataclass(frozen=True)
class PageSelection:
    """The logical pages to move (ascending) and how the others are accounted for."""

    pages: Int64s
    total: int          # the pool's logical pages (blocks for FastDeploy, slots for Mamba)
    method: str

    def __len__(self) -> int:
        return len(self.pages)

    def as_dict(self) -> dict[str, object]:
        return {"pages_copied": len(self.pages), "pages_total": self.total,
                "method": self.method}


def buffer_mr_edges(pools: Sequence[Sequence[PoolBuffer]],
                    ranges: Sequence[Sequence[MrRange]]) -> list[Int64s]:
    """Per buffer index: offsets where the MR cover may change on any of the nodes."""
    out: list[Int64s] = []
    for i in range(len(pools[0]) if pools else 0):
        per_node = [buffer_edges(bufs[i].base, bufs[i].nbytes, [(r[0], r[1] - r[0]) for r in rng])
                    for bufs, rng in zip(pools, ranges, strict=True)]
        out.append(np.unique(np.concatenate(per_node)))
    return out


def _inside_one(ranges: Sequence[MrRange], starts: Int64s,
                ends: Int64s) -> npt.NDArray[np.bool_]:
    if not ranges:
        return np.zeros(len(starts), dtype=bool)
    lo = np.array([r[0] for r in ranges], dtype=np.int64)
    hi = np.array([r[1] for r in ranges], dtype=np.int64)
    i = np.searchsorted(lo, starts, side="right") - 1
    ok: npt.NDArray[np.bool_] = (i >= 0) & (hi[np.maximum(i, 0)] >= ends)
    return ok


def _outside_one(geometry: PoolGeometry, pools: Sequence[Sequence[PoolBuffer]],
                 ranges: Sequence[Sequence[MrRange]], pages: Int64s | None = None) -> Int64s:
    """The pages (of ``pages``, default all) with an extent not inside one MR on some node:
    a searchsorted of the extents over the sorted MR starts, so the cost is the extents'
    and the MRs' count, never their product."""
    ext = geometry.page_extents() if pages is None else geometry.page_extents(pages)
    chosen = [np.zeros(0, dtype=np.int64)]
    for bufs, rng in zip(pools, ranges, strict=True):
        bases = np.array([b.base for b in bufs], dtype=np.int64)
        starts = bases[ext.buffer] + ext.offset
        chosen.append(ext.page[~_inside_one(rng, starts, starts + ext.size)])
    return np.unique(np.concatenate(chosen))


def _walk(geometry: PoolGeometry, pools: Sequence[Sequence[PoolBuffer]],
          ranges: Sequence[Sequence[MrRange]]) -> Int64s:
    """The per-page reference: the pages with an extent not inside one MR, first and last."""
    return np.union1d(_outside_one(geometry, pools, ranges),
                      np.array([0, geometry.page_count - 1], dtype=np.int64))


def select_pages(geometry: PoolGeometry, pools: Sequence[Sequence[PoolBuffer]],
                 ranges: Sequence[Sequence[MrRange]], *, real: bool, seed: int = 0,
                 walk_below: int = COPY_ALL_BELOW, sample: int = SAMPLE) -> PageSelection:
    """The pages to move on nodes whose buffers are ``pools`` and MRs ``ranges``.

    ``walk_below``: at or below this many page-meta rows every page is walked. Above it a
    virtual pool sends, of the pages at the edges, only those not inside one MR (as the walk
    does): a pool of thousands of correct MRs then moves about as many pages as one of a few
    MRs; a real pool sends every page at the edges, whose bytes are compared.
    """
    count = geometry.page_count
    if not geometry.has_page_meta:
        return PageSelection(np.arange(count, dtype=np.int64), count, EVERY_PAGE)
    fams = [f for f in geometry.extent_families() if f.count]
    if walks_every_page(fams, walk_below):
        if real:
            return PageSelection(np.arange(count, dtype=np.int64), count, EVERY_PAGE)
        return PageSelection(_walk(geometry, pools, ranges), count, OUTSIDE_ONE_MR)
    picked = edge_pages(fams, buffer_mr_edges(pools, ranges), seed=seed, sample=sample)
    at_edges = np.unique(np.concatenate([p for p, _ in picked]))
    anchors = np.unique(np.concatenate([a for _, a in picked]))
    if real:
        pages, method = np.union1d(at_edges, anchors), EDGES_AND_SAMPLE
    else:
        at_edges = at_edges[at_edges < count]
        pages = np.union1d(_outside_one(geometry, pools, ranges, at_edges), anchors)
        method = EDGES_OUTSIDE_ONE_MR
    return PageSelection(pages[pages < count], count, method)


def family_object_stride(copy_unit: int, families: Sequence[ExtentFamily], index: int) -> int:
    """transfers.object_stride from the extent families: the largest row size of buffer ``index``
    when every row of it sits inside one block of that size, else ``copy_unit``.

    A row at ``base + p * stride`` of size ``z`` fits iff its offset modulo the unit ``u`` is
    at most ``u - z``; those residues repeat every ``u / gcd(stride, u)`` pages, so that many
    pages (at most) decide, whatever the page count.
    """
    fams = [f for f in families if f.buffer == index and f.count]
    unit = max((f.size for f in fams), default=0)
    if unit <= 0:
        return copy_unit
    for f in fams:
        period = unit // np.gcd(f.stride % unit, unit) if f.stride % unit else 1
        n = min(f.count, int(period))
        for start in range(0, n, _RESIDUE_CHUNK):
            p = np.arange(start, min(n, start + _RESIDUE_CHUNK), dtype=np.int64)
            if int(((f.base + p * f.stride) % unit).max()) + f.size > unit:
                return copy_unit
    return unit
