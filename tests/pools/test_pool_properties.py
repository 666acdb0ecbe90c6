"""Property tests over random valid geometries of every pool type and layout."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvreg.harness.pools import (
    HostPoolGroup,
    PoolGeometry,
    make_geometry,
)
from kvreg.harness.strategies import GEOMETRIES

single = st.one_of(*GEOMETRIES.values())  # the exported strategies (harness/strategies.py)
anchor_and_sides = st.builds(
    lambda members: HostPoolGroup(members),
    st.lists(single, min_size=1, max_size=3),
)
any_geometry = single | anchor_and_sides


def page_limit(geo: PoolGeometry) -> int:
    """Pages every member can list (members keep their own page counts, docs/pools.md §2.9)."""
    if isinstance(geo, HostPoolGroup):
        return min(page_limit(m) for m in geo.members)
    return int(geo.page_count)


@pytest.mark.expensive_property
@settings(max_examples=300, deadline=None)
@given(any_geometry)
def test_every_extent_inside_its_buffer_and_one_copy_unit(geo: PoolGeometry) -> None:
    # docs/pools.md §4 (pointers) + §5 (copy units): every row lies in its buffer, inside one
    # copy_unit block from the base, and rows never overlap each other.
    if not geo.has_page_meta:
        return
    bufs = geo.buffers()
    ext = geo.page_extents()
    nbytes = np.array([b.nbytes for b in bufs], dtype=np.int64)
    unit = np.array([b.copy_unit for b in bufs], dtype=np.int64)
    assert len(ext) > 0
    assert np.all(ext.size > 0)
    assert np.all((ext.buffer >= 0) & (ext.buffer < len(bufs)))
    assert np.all(ext.offset >= 0)
    assert np.all(ext.end <= nbytes[ext.buffer])
    u = unit[ext.buffer]
    assert np.array_equal(ext.offset // u, (ext.end - 1) // u)
    order = np.lexsort((ext.offset, ext.buffer))
    b, start, end = ext.buffer[order], ext.offset[order], ext.end[order]
    same = b[1:] == b[:-1]
    assert np.all(start[1:][same] >= end[:-1][same])


@pytest.mark.expensive_property
@settings(max_examples=300, deadline=None)
@given(any_geometry)
def test_page_extents_are_whole_granularity_pages(geo: PoolGeometry) -> None:
    # docs/pools.md §4 "points to note": in page-first layouts each pointer/size pair is exactly one
    # G-sized page starting at a multiple of G, so chunk = floor(LIM/G)*G never splits one (§1.1).
    if not geo.has_page_meta:
        return
    bufs = geo.buffers()
    ext = geo.page_extents()
    for index, buf in enumerate(bufs):
        mine = ext.buffer == index
        if buf.granularity is None or not mine.any():
            continue
        g = buf.granularity
        assert np.all(ext.size[mine] == g)
        assert np.all(ext.offset[mine] % g == 0)
        chunk = 3 * g  # a small aligned chunk: several seams per buffer
        assert np.array_equal(ext.offset[mine] // chunk, (ext.end[mine] - 1) // chunk)


@pytest.mark.expensive_property
@settings(max_examples=200, deadline=None)
@given(any_geometry, st.data())
def test_subset_of_pages_matches_the_full_listing(geo: PoolGeometry, data: st.DataObject) -> None:
    # get_page_buffer_meta for some pages = the full listing's rows of those pages (docs/pools.md
    # §4);
    # catches per-page strides computed from the wrong page.
    if not geo.has_page_meta:
        return
    full = geo.page_extents()
    limit = page_limit(geo)
    chosen = data.draw(st.lists(st.integers(0, limit - 1), min_size=1, max_size=4, unique=True))
    part = geo.page_extents(np.array(chosen))
    for p in chosen:
        mine_full = full.page == p
        mine_part = part.page == p
        assert np.array_equal(full.offset[mine_full], part.offset[mine_part])
        assert np.array_equal(full.buffer[mine_full], part.buffer[mine_part])
        assert np.array_equal(full.size[mine_full], part.size[mine_part])


@pytest.mark.expensive_property
@settings(max_examples=300, deadline=None)
@given(any_geometry)
def test_buffers_are_consistent(geo: PoolGeometry) -> None:
    # docs/pools.md §0: the registered byte count is numel * itemsize; regions tile each buffer;
    # granularity (when passed) divides the buffer's page-aligned part.
    for buf in geo.buffers():
        assert buf.nbytes == math.prod(buf.shape) * buf.dtype.itemsize
        assert sum(r.nbytes for r in buf.regions) == buf.nbytes
        if buf.granularity is not None:
            assert buf.nbytes % buf.granularity == 0
            assert buf.copy_unit == buf.granularity
        if buf.nbytes:
            assert buf.nbytes % buf.copy_unit == 0


SIZE_PER_TOKEN_POOLS = ["mha", "mha_k_only", "mha_asymmetric", "mla", "mamba"]


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(SIZE_PER_TOKEN_POOLS).flatmap(lambda k: GEOMETRIES[k]))
def test_total_bytes_equal_size_times_size_per_token(geo: PoolGeometry) -> None:
    # docs/pools.md §0: requested = S * size_per_token, with size_per_token from §2.1-§2.4, §2.6 —
    # an independent formula for the bytes the buffers' shapes hold.
    derived = geo.describe()["derived"]
    assert geo.total_nbytes == derived["size"] * derived["size_per_token"]


@settings(max_examples=150, deadline=None)
@given(any_geometry)
def test_describe_is_json_and_params_round_trip(geo: PoolGeometry) -> None:
    summary = geo.describe()
    text = json.dumps(summary)
    again = make_geometry(geo.pool_type, **json.loads(text)["params"])
    assert again == geo
    assert again.describe() == summary
    assert summary["total_nbytes"] == sum(b["nbytes"] for b in summary["buffers"])
