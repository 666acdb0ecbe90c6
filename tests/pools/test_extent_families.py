"""Closed-form page extents (harness/pools/families.py) against the per-page walk.

The families must reproduce page_extents() row for row, and the seam arithmetic must find exactly
the rows the per-page walk finds, with seams placed right (on the copy unit), wrong (byte
offsets, off by one byte) and at random, for every pool type and layout (docs/pools.md §4, §5).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from kvreg.harness.pools import HostPoolGroup, MHAGeometry, NoPageMetaError, PoolGeometry
from kvreg.harness.pools.base import ExtentFamily
from kvreg.harness.pools.families import (
    extent_at,
    families_of,
    max_extent_size,
    row_count,
    straddling_in_buffer,
    straddling_walk,
    touching_pages,
)
from kvreg.harness.strategies import GEOMETRIES

single = st.one_of(*GEOMETRIES.values())
any_geometry = single | st.builds(HostPoolGroup, st.lists(single, min_size=1, max_size=3))


def _materialise(fams: tuple[ExtentFamily, ...]) -> dict[int, tuple[int, int, int, int]]:
    out = {}
    for f in fams:
        for p in range(f.count):
            out[f.row(p)] = (f.buffer, f.offset(p), f.size, p)
    return out


@settings(max_examples=200, deadline=None)
@given(any_geometry)
def test_families_reproduce_page_extents_row_for_row(geo: PoolGeometry) -> None:
    if not geo.has_page_meta:
        with pytest.raises(NoPageMetaError):
            families_of(geo)
        return
    ext = geo.page_extents()
    fams = families_of(geo)
    assert row_count(fams) == len(ext)
    rows = _materialise(fams)
    assert sorted(rows) == list(range(len(ext)))
    for r, (b, off, size, page) in rows.items():
        assert (int(ext.buffer[r]), int(ext.offset[r]), int(ext.size[r]),
                int(ext.page[r])) == (b, off, size, page)
    probe = sorted({0, len(ext) - 1, len(ext) // 2})
    for r in probe:
        assert extent_at(fams, r) == rows[r]
    with pytest.raises(IndexError):
        extent_at(fams, len(ext))
    for i in range(len(geo.buffers())):
        sizes = ext.size[ext.buffer == i]
        assert max_extent_size(fams, i) == (int(sizes.max()) if len(sizes) else None)


def _seams(draw: st.DrawFn, nbytes: int, unit: int) -> list[int]:
    kind = draw(st.sampled_from(["right", "wrong", "random", "byte-offset"]))
    if nbytes < 2:
        return []
    if kind == "right":
        k = draw(st.integers(1, max(1, nbytes // unit)))
        return [s for s in range(k * unit, nbytes, k * unit)][:64]
    if kind == "byte-offset":
        step = draw(st.integers(1, nbytes - 1))
        return list(range(step, nbytes, step))[:64]
    if kind == "wrong":
        k = draw(st.integers(1, max(1, nbytes // unit)))
        delta = draw(st.sampled_from([-1, 1]))
        return [s + delta for s in range(k * unit, nbytes, k * unit) if 0 < s + delta < nbytes][:64]
    return draw(st.lists(st.integers(1, nbytes - 1), max_size=12))


@st.composite
def geometry_and_seams(draw: st.DrawFn) -> tuple[PoolGeometry, int, list[int]]:
    geo = draw(any_geometry)
    assume(geo.has_page_meta)
    index = draw(st.integers(0, len(geo.buffers()) - 1))
    spec = geo.buffers()[index]
    return geo, index, _seams(draw, spec.nbytes, spec.copy_unit)


@settings(max_examples=300, deadline=None)
@given(geometry_and_seams(), st.integers(1, 8))
def test_seam_arithmetic_agrees_with_the_per_page_walk(
    case: tuple[PoolGeometry, int, list[int]], first: int
) -> None:
    geo, index, seams = case
    fams = families_of(geo)
    walk = straddling_in_buffer(fams, index, seams, first=first, walk_below=1 << 62)
    arith = straddling_in_buffer(fams, index, seams, first=first, walk_below=0)
    assert (walk.method, arith.method) == ("walk", "arithmetic")
    assert (arith.count, arith.rows, arith.seams) == (walk.count, walk.rows, walk.seams)
    # and both agree with a plain per-row check on page_extents()
    ext = geo.page_extents()
    cuts = sorted(set(seams))
    hits = [r for r in range(len(ext)) if ext.buffer[r] == index
            and any(ext.offset[r] < s < ext.offset[r] + ext.size[r] for s in cuts)]
    assert walk.count == len(hits)
    assert list(walk.rows) == hits[:first]


def test_seams_on_the_copy_unit_cut_no_page_and_byte_offsets_do() -> None:
    # docs/pools.md §1.1: seams on multiples of P*layout_dim never cut a page_first page.
    geo = MHAGeometry("page_first", 4, 2, 16, "bfloat16", 3, 1000)
    fams = families_of(geo)
    unit = geo.page_bytes
    right = list(range(7 * unit, geo.buffers()[0].nbytes, 7 * unit))
    assert straddling_in_buffer(fams, 0, right, walk_below=0).count == 0
    wrong = [s + 1 for s in right]
    hits = straddling_in_buffer(fams, 0, wrong, walk_below=0)
    assert hits.count == len(wrong)          # each off-by-one seam cuts exactly one page
    # rows are page-major (K, V of page 0, then page 1, ...): the V half's first cut page
    # comes before the K half's page 7
    _, off, size, _ = extent_at(fams, hits.rows[0])
    assert off < hits.seams[0] < off + size and off >= geo.v_offset


def test_a_page_cut_by_two_seams_counts_once() -> None:
    fam = ExtentFamily(0, 0, 100, 100, 10, 0, 1)
    hits = straddling_in_buffer([fam], 0, [150, 160, 170, 250], walk_below=0)
    assert (hits.count, hits.rows, hits.seams) == (2, (1, 2), (150, 250))
    assert straddling_walk([fam], [150, 160, 170, 250]).count == 2


def test_one_token_pages_at_four_tib_cost_seams_not_pages() -> None:
    # 64 layers x 8 heads x 128 x bf16, one-token pages: 16.8 M pages, 2 x 64 families in
    # layer_first; byte-offset seams every GiB + 1 byte cut one row each, found by arithmetic.
    geo = MHAGeometry("layer_first", 64, 8, 128, "bfloat16", 1, 1 << 24)
    fams = families_of(geo)
    assert len(fams) == 128 and row_count(fams) == 128 << 24
    nbytes = geo.buffers()[0].nbytes
    seams = np.arange(1 << 30, nbytes, 1 << 30, dtype=np.int64) + 1
    hits = straddling_in_buffer(fams, 0, seams)
    assert hits.method == "arithmetic"
    assert hits.count == len(seams)
    _, off, size, _ = extent_at(fams, hits.rows[0])
    assert off < hits.seams[0] < off + size


@given(st.integers(1, 64), st.integers(1, 64), st.integers(0, 40), st.integers(1, 50),
       st.lists(st.integers(0, 5000), max_size=6))
def test_touching_pages_hold_every_page_next_to_an_edge(
    stride: int, size: int, base: int, count: int, edges: list[int]
) -> None:
    assume(size <= stride)
    fam = ExtentFamily(0, base, stride, size, count, 0, 1)
    got = set(touching_pages(fam, np.array(edges, dtype=np.int64)).tolist())
    assert all(0 <= p < count for p in got)
    for e in edges:
        for p in range(count):
            if fam.offset(p) <= e <= fam.offset(p) + size:
                assert p in got
