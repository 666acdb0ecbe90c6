"""Property tests over random valid geometries of every pool type and layout."""

from __future__ import annotations

import json
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from kvreg.harness.pools import (
    AsymmetricMHAGeometry,
    DeepSeekV4PagedGeometry,
    DeepSeekV4StateGeometry,
    DSAIndexerGeometry,
    FastDeployGeometry,
    HostPoolGroup,
    KOnlyMHAGeometry,
    MambaGeometry,
    MHAGeometry,
    MLAGeometry,
    MLAKVSplitGeometry,
    PoolGeometry,
    make_geometry,
)

small = st.integers(1, 5)
pages = st.integers(1, 7)
dtypes = st.sampled_from(["float16", "bfloat16", "float32", "uint8", "float8_e4m3fn"])
PAGE_LAYOUTS = ["page_first", "page_first_direct"]


def shape(min_value: int = 1) -> st.SearchStrategy[tuple[int, ...]]:
    return st.lists(st.integers(min_value, 4), min_size=1, max_size=3).map(tuple)


GEOMETRIES: dict[str, st.SearchStrategy[PoolGeometry]] = {
    "mha": st.builds(
        MHAGeometry,
        st.sampled_from(["layer_first", "page_first", "page_first_direct", "page_head"]),
        small, small, small, dtypes, small, pages,
    ),
    "mha_k_only": st.builds(
        KOnlyMHAGeometry, st.sampled_from(["layer_first", *PAGE_LAYOUTS]),
        small, small, small, dtypes, small, pages,
    ),
    "mha_asymmetric": st.builds(
        AsymmetricMHAGeometry, st.sampled_from(PAGE_LAYOUTS),
        small, small, small, small, dtypes, small, pages,
    ),
    "mla": st.builds(
        MLAGeometry, st.sampled_from(["layer_first", *PAGE_LAYOUTS]),
        small, small, st.integers(0, 4), dtypes, small, pages, st.none() | small,
    ),
    "mla_kv_split": st.builds(
        MLAKVSplitGeometry, small, small, small, dtypes, small, pages,
        index_layer_num=st.just(0),
    )
    | st.builds(
        MLAKVSplitGeometry, small, small, small, dtypes, small, pages,
        k_width=small, k_dtype=dtypes, fp8_dsa=st.booleans(), index_layer_num=small,
        index_head_dim=small, index_dtype=dtypes, index_scale=st.booleans(),
    ),
    "dsa_indexer": st.builds(
        DSAIndexerGeometry, st.sampled_from(["layer_first", *PAGE_LAYOUTS]),
        small, st.integers(1, 16), st.integers(1, 16), small, pages,
    ),
    "mamba": st.builds(
        MambaGeometry, st.sampled_from(PAGE_LAYOUTS), small, shape(0), dtypes,
        st.lists(shape(1), min_size=1, max_size=3), dtypes, pages,
    ),
    "deepseek_v4_paged": st.builds(
        DeepSeekV4PagedGeometry, st.sampled_from(["layer_first", *PAGE_LAYOUTS]),
        small, st.integers(1, 40), small, pages,
    ),
    "deepseek_v4_state": st.builds(
        lambda layout, n, row, ring, p, num, dt: DeepSeekV4StateGeometry(
            layout, [(2, *row)] * n, ring, p, num, dt
        ),
        st.sampled_from(["layer_first", *PAGE_LAYOUTS]), small, shape(1), small, small, pages,
        dtypes,
    ),
    "fastdeploy": st.builds(
        FastDeployGeometry, small, small, small,
        st.sampled_from(["float32", "bfloat16", "float16", "uint8"]), small, pages,
        st.integers(0, 2),
    )
    | st.builds(
        FastDeployGeometry, small, small, small, st.just("block_wise_fp8"), small, pages,
        st.integers(0, 2), small,
    ),
}  # fmt: skip

single = st.one_of(*GEOMETRIES.values())
anchor_and_sides = st.builds(
    lambda members: HostPoolGroup(members),
    st.lists(single, min_size=1, max_size=3),
)
any_geometry = single | anchor_and_sides


def page_limit(geo: PoolGeometry) -> int:
    """Pages every member can list (group members keep their own page counts, pools.md §2.9)."""
    if isinstance(geo, HostPoolGroup):
        return min(page_limit(m) for m in geo.members)
    return int(geo.page_count)


@settings(max_examples=300, deadline=None)
@given(any_geometry)
def test_every_extent_inside_its_buffer_and_one_copy_unit(geo: PoolGeometry) -> None:
    # pools.md §4 (pointers) + §5 (copy units): every row lies in its buffer, inside one
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


@settings(max_examples=300, deadline=None)
@given(any_geometry)
def test_page_extents_are_whole_granularity_pages(geo: PoolGeometry) -> None:
    # pools.md §4 "points to note": in page-first layouts each pointer/size pair is exactly one
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


@settings(max_examples=200, deadline=None)
@given(any_geometry, st.data())
def test_subset_of_pages_matches_the_full_listing(geo: PoolGeometry, data: st.DataObject) -> None:
    # get_page_buffer_meta for some pages = the full listing's rows of those pages (pools.md §4);
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


@settings(max_examples=300, deadline=None)
@given(any_geometry)
def test_buffers_are_consistent(geo: PoolGeometry) -> None:
    # pools.md §0: the registered byte count is numel * itemsize; regions tile each buffer;
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
    # pools.md §0: requested = S * size_per_token, with size_per_token from §2.1-§2.4, §2.6 —
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
