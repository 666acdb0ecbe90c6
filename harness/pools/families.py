"""Page extents as arithmetic progressions: seam questions cost O(families x seams), not O(pages).

Every pointer slot of a pool's page meta is one progression: row ``row_start + p * row_step`` of
``page_extents()`` is ``[base + p * stride, base + p * stride + size)`` in buffer ``buffer``, for
``p`` in ``range(count)``. A 4 TiB pool of one-token pages has 16 M pages but a handful of
families (2 L of them for layer_first: one per layer and half), so "which pages straddle a seam",
"which pages touch a registration edge" and "what is row r" are answered exactly by integer
arithmetic. The per-page walk stays the reference below ``WALK_BELOW`` rows; a property test
proves both agree on random geometries with seams placed right and wrong.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .base import ExtentFamily, Int64Array, PoolGeometry

__all__ = [
    "WALK_BELOW",
    "ExtentFamily",
    "SeamHits",
    "extent_at",
    "families_of",
    "max_extent_size",
    "row_count",
    "straddling_in_buffer",
    "straddling_walk",
    "touching_pages",
]

WALK_BELOW = 1 << 16   # rows: below this, the per-page walk is cheap and stays the judge


def families_of(geometry: PoolGeometry) -> tuple[ExtentFamily, ...]:
    """The geometry's page-meta rows as families (raises NoPageMetaError where it has none)."""
    return geometry.extent_families()


def row_count(families: Sequence[ExtentFamily]) -> int:
    return sum(f.count for f in families)


def max_extent_size(families: Sequence[ExtentFamily], buffer: int) -> int | None:
    """The largest row size in ``buffer`` (None when no row lies there)."""
    sizes = [f.size for f in families if f.buffer == buffer and f.count]
    return max(sizes) if sizes else None


def extent_at(families: Sequence[ExtentFamily], row: int) -> tuple[int, int, int, int]:
    """(buffer, offset, size, page) of global row ``row``, as ``page_extents()[row]`` would be."""
    for f in families:
        if not f.count or row < f.row_start:
            continue
        q, r = divmod(row - f.row_start, f.row_step)
        if r == 0 and q < f.count:
            return f.buffer, f.offset(q), f.size, q
    raise IndexError(f"row {row} is not a page-meta row of this pool")


def _straddle_bounds(f: ExtentFamily, seams: Int64Array) -> tuple[Int64Array, Int64Array]:
    """For each seam s, pages p with offset(p) < s < offset(p) + size: [lo, hi] (maybe empty).

    offset < s  <=>  p * stride <= s - base - 1;  s < offset + size  <=>  p * stride >= s -
    base - size + 1. Both ends grow with s, so sorted seams give sorted intervals.
    """
    rel = seams - f.base
    hi = np.minimum(np.floor_divide(rel - 1, f.stride), f.count - 1)
    lo = np.maximum(-np.floor_divide(-(rel - f.size + 1), f.stride), 0)
    return lo, hi


def _new_pages(lo: Int64Array, hi: Int64Array) -> tuple[int, Int64Array]:
    """Union of intervals [lo_i, hi_i] whose ends both grow with i.

    Returns the union's size and, per interval, the first page no earlier interval holds (an
    earlier interval covers exactly up to the previous hi, or nothing new below lo_i).
    """
    if not len(lo):
        return 0, lo
    prev = np.concatenate((lo[:1] - 1, np.maximum.accumulate(hi)[:-1]))
    new_lo = np.maximum(lo, prev + 1)
    return int(np.maximum(hi - new_lo + 1, 0).sum()), new_lo


@dataclass(frozen=True)
class SeamHits:
    """Rows that contain a seam strictly inside: the count and the first few, in row order."""

    count: int
    rows: tuple[int, ...]          # first rows (global page-meta row numbers), ascending
    seams: tuple[int, ...]         # for each listed row, the first seam inside it
    method: str                    # "walk" or "arithmetic"


def straddling_in_buffer(families: Sequence[ExtentFamily], buffer: int,
                         seams: npt.ArrayLike, *, first: int = 20,
                         walk_below: int = WALK_BELOW) -> SeamHits:
    """Rows of ``buffer`` with a seam strictly inside (seams: sorted offsets from its base).

    Exact: the per-page walk for small pools, closed-form page ranges above ``walk_below`` rows.
    """
    cuts = np.unique(np.asarray(seams, dtype=np.int64))
    fams = [f for f in families if f.buffer == buffer and f.count]
    if sum(f.count for f in fams) < walk_below:
        return straddling_walk(fams, cuts, first=first)
    total = 0
    found: list[tuple[int, int]] = []
    for f in fams:
        if not len(cuts):
            break
        lo, hi = _straddle_bounds(f, cuts)
        n, new_lo = _new_pages(lo, hi)
        total += n
        taken = 0   # the family's first pages are its lowest rows: `first` of them suffice
        for k in np.nonzero(hi >= new_lo)[0]:
            for p in range(int(new_lo[k]), int(hi[k]) + 1):
                found.append((f.row(p), _first_seam_inside(cuts, f, p)))
                taken += 1
                if taken >= first:
                    break
            if taken >= first:
                break
    found.sort()
    head = found[:first]
    return SeamHits(total, tuple(r for r, _ in head), tuple(s for _, s in head), "arithmetic")


def _first_seam_inside(cuts: Int64Array, f: ExtentFamily, page: int) -> int:
    off = f.offset(page)
    return int(cuts[int(np.searchsorted(cuts, off, side="right"))])


def straddling_walk(families: Sequence[ExtentFamily], seams: npt.ArrayLike, *,
                    first: int = 20) -> SeamHits:
    """The per-page reference: materialise every row and test it against every seam."""
    cuts = np.unique(np.asarray(seams, dtype=np.int64))
    rows: list[Int64Array] = []
    offs: list[Int64Array] = []
    sizes: list[Int64Array] = []
    for f in families:
        pages = np.arange(f.count, dtype=np.int64)
        rows.append(f.row_start + pages * f.row_step)
        offs.append(f.base + pages * f.stride)
        sizes.append(np.full(f.count, f.size, dtype=np.int64))
    if not rows or not len(cuts):
        return SeamHits(0, (), (), "walk")
    row = np.concatenate(rows)
    off = np.concatenate(offs)
    size = np.concatenate(sizes)
    nxt = np.searchsorted(cuts, off, side="right")
    inside = nxt < len(cuts)
    seam = cuts[np.minimum(nxt, len(cuts) - 1)]
    hit = np.nonzero(inside & (seam < off + size))[0]
    order = hit[np.argsort(row[hit], kind="stable")][:first]
    return SeamHits(len(hit), tuple(int(r) for r in row[order]),
                    tuple(int(s) for s in seam[order]), "walk")


def touching_pages(f: ExtentFamily, edges: npt.ArrayLike) -> Int64Array:
    """Pages of ``f`` next to an edge e: the last two that start at or before e (one of them
    ends at or holds e) and the first that starts after it. These are the pages a seam or a
    registration edge decides; every other page lies between two edges."""
    cuts = np.asarray(edges, dtype=np.int64)
    if not f.count or not len(cuts):
        return np.zeros(0, dtype=np.int64)
    last = np.floor_divide(cuts - f.base, f.stride)
    pages = np.concatenate((last - 1, last, last + 1))
    return np.unique(np.clip(pages, 0, f.count - 1))
