"""Planner properties over random geometries and limits (issue: reference registration)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvreg.harness.plan.chunking import PlanError, chunk_size, plan_chunks, plan_pool, straddling
from kvreg.harness.pools import PoolGeometry
from kvreg.harness.strategies import chunk_limits, registered_geometries


@st.composite
def geometry_and_limit(draw: st.DrawFn) -> tuple[PoolGeometry, int]:
    g = draw(registered_geometries())
    return g, draw(chunk_limits(g))


@given(geometry_and_limit())
def test_reference_chunks_tile_every_buffer_on_copy_unit_seams(case: tuple[PoolGeometry, int]
                                                               ) -> None:
    geometry, limit = case
    plan = plan_pool(geometry, limit, "reference")
    for bp in plan.buffers:
        chunks = bp.plan.chunks
        # cover the buffer exactly, in order, without overlap or gap
        assert [off for off, _ in chunks] == list(np.cumsum([0] + [s for _, s in chunks])[:-1])
        assert sum(s for _, s in chunks) == bp.spec.nbytes
        assert all(0 < s <= limit for _, s in chunks)
        # every seam on a multiple of the unit; only the last chunk may be partial
        assert bp.unit is not None
        assert all(off % bp.unit == 0 for off, _ in chunks)
        assert all(s % bp.unit == 0 for _, s in chunks[:-1])
    # no page extent crosses a seam (docs/pools.md §1.1 / §5.2)
    assert plan.straddling_count == 0


@given(geometry_and_limit())
def test_byte_offset_seams_sit_on_limit_multiples(case: tuple[PoolGeometry, int]) -> None:
    geometry, limit = case
    plan = plan_pool(geometry, limit, "byte-offset")
    for bp in plan.buffers:
        assert all(off % limit == 0 for off, _ in bp.plan.chunks)


@given(st.integers(0, 10_000), st.integers(1, 500), st.integers(1, 500))
def test_plan_chunks_matches_the_upstream_formula(total: int, unit: int, extra: int) -> None:
    limit = unit + extra
    chunk = (limit // unit) * unit          # docs/pools.md §1.1: floor(LIM / G) * G
    assert chunk_size(limit, unit) == chunk
    chunks = plan_chunks(total, limit, unit)
    assert chunks == [(off, min(chunk, total - off)) for off in range(0, total, chunk)]


def test_sglang_unit_test_boundaries() -> None:
    # docs/pools.md §3 test 11: 2500 MiB, G = 300 MiB, LIM = 1 GiB -> 900, 900, 700 MiB
    mib = 1 << 20
    assert plan_chunks(2500 * mib, 1 << 30, 300 * mib) == [
        (0, 900 * mib), (900 * mib, 900 * mib), (1800 * mib, 700 * mib)]
    assert plan_chunks(0, 1 << 30, 300 * mib) == []   # zero-byte buffer: no calls


@pytest.mark.parametrize("unit,limit,match", [
    (0, 10, "must be positive, got 0"),
    (-3, 10, "must be positive"),
    (11, 10, "granularity=11, chunk_limit=10"),
    (1.5, 10, "must be an int"),
])
def test_impossible_granularity_is_rejected_before_any_call(unit: object, limit: int,
                                                            match: str) -> None:
    with pytest.raises(PlanError, match=match):
        plan_chunks(100, limit, unit)  # type: ignore[arg-type]


def test_straddling_finds_extents_containing_a_seam() -> None:
    seams = np.array([100, 200])
    offs = np.array([0, 90, 100, 150, 195, 200])
    sizes = np.array([100, 20, 100, 60, 5, 10])
    assert straddling(seams, offs, sizes).tolist() == [1, 3]
