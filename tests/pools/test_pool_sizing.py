"""Host sizing (docs/pools.md §0), DCP division, and the DSA indexer's extra pages (docs/pools.md
§2.5)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvreg.harness.pools import (
    DSAIndexerGeometry,
    GeometryError,
    MambaGeometry,
    MHAGeometry,
    base_size_from_host_gb,
    base_size_from_ratio,
    host_sizing,
)


def test_one_page_more_even_when_size_is_a_multiple() -> None:
    # docs/pools.md §0: N = S0 // P + 1, S = N * P, "always one page more than floor".
    assert host_sizing(10, 4) == (4, 3, 12)
    assert host_sizing(8, 4) == (4, 3, 12)
    assert host_sizing(0, 4) == (4, 1, 4)
    assert host_sizing(7, 1) == (1, 8, 8)


@given(st.integers(0, 10**12), st.integers(1, 512), st.integers(1, 8))
def test_sizing_rounds_up_by_one_page(size: int, p: int, dcp: int) -> None:
    # docs/pools.md §0: with the widened page size p*dcp, P = p, N = S0 // P + 1.
    got_p, n, s = host_sizing(size, p * dcp, dcp)
    assert got_p == p
    assert s == n * p
    assert 1 <= s - size <= p  # strictly more slots than asked, by at most one page
    assert n == size // p + 1


def test_dcp_divides_page_size() -> None:
    # docs/pools.md §0: page_size arrives widened by dcp_size and must divide evenly.
    assert host_sizing(10, 8, dcp_size=2) == (4, 3, 12)
    with pytest.raises(GeometryError, match="page_size must be divisible by dcp_size"):
        host_sizing(10, 6, dcp_size=4)


@pytest.mark.parametrize(
    ("args", "field"),
    [((-1, 4, 1), "size"), ((4, 0, 1), "page_size"), ((4, 4, 0), "dcp_size")],
)
def test_sizing_rejects_bad_arguments(args: tuple[int, int, int], field: str) -> None:
    with pytest.raises(GeometryError, match=field):
        host_sizing(*args)


def test_base_size_from_budget_and_ratio() -> None:
    # docs/pools.md §0: S0 = int(host_size*1e9 // size_per_token), else int(device size * ratio).
    assert base_size_from_host_gb(1.0, 1000) == 1_000_000
    assert base_size_from_host_gb(2.5, 3) == 833_333_333
    assert base_size_from_ratio(1000, 2.5) == 2500
    with pytest.raises(GeometryError, match="size_per_token"):
        base_size_from_host_gb(1.0, 0)


def test_from_size_uses_host_sizing() -> None:
    # docs/pools.md §0 applied to MHA with DCP: page_size 8 over dcp 2 -> P = 4; S0 = 10 -> N = 3.
    geo = MHAGeometry.from_size(
        10, 8, dcp_size=2, layout="page_first", layer_num=2, head_num=1, head_dim=4, dtype="bf16"
    )
    assert (geo.page_size, geo.page_num, geo.size) == (4, 3, 12)


def test_mamba_slots_are_size_plus_one() -> None:
    # docs/pools.md §2.6: page_size = 1, S = N = size0 + 1.
    geo = MambaGeometry.from_size(
        4,
        layout="page_first",
        num_mamba_layers=1,
        temporal_shape=(2,),
        temporal_dtype="fp16",
        conv_shapes=[],
        conv_dtype="fp32",
    )
    assert (geo.page_size, geo.page_num) == (1, 5)
    with pytest.raises(GeometryError, match="page_size must be 1"):
        MambaGeometry.from_size(
            4,
            2,
            layout="page_first",
            num_mamba_layers=1,
            temporal_shape=(2,),
            temporal_dtype="fp16",
            conv_shapes=[],
            conv_dtype="fp32",
        )


@given(st.integers(1, 64), st.integers(1, 1000))
def test_dsa_indexer_holds_one_or_two_extra_pages(p: int, n: int) -> None:
    # docs/pools.md §2.5: indexer_page_num = (S + P + 1) // P = N+1 for P >= 2, N+2 for P = 1.
    geo = DSAIndexerGeometry("page_first", 2, 8, 4, p, n)
    assert geo.indexer_page_num == (n * p + p + 1) // p
    assert geo.indexer_page_num == (n + 2 if p == 1 else n + 1)
    assert geo.page_count == n  # transfers address the anchor's N pages only
    assert geo.buffers()[0].shape[0] == geo.indexer_page_num
