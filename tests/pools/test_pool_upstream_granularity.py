"""Pin every registration granularity of upstream's test_hicache_host_register.py (docs/pools.md §3)
and the None entries of the §2 tables."""

from __future__ import annotations

import pytest

from kvreg.harness.pools import (
    AsymmetricMHAGeometry,
    DeepSeekV4PagedGeometry,
    DeepSeekV4StateGeometry,
    DSAIndexerGeometry,
    KOnlyMHAGeometry,
    MambaGeometry,
    MHAGeometry,
    MLAGeometry,
    MLAKVSplitGeometry,
    PoolGeometry,
)

BOTH = ["page_first", "page_first_direct"]


def granularities(geometry: PoolGeometry) -> list[int | None]:
    return [buf.granularity for buf in geometry.buffers()]


@pytest.mark.parametrize("layout", BOTH)
def test_dsa_indexer_granularity_2048(layout: str) -> None:
    # docs/pools.md §3 test 1: layer_num=4 (3 target + 1 draft), indexer_page_num=3,
    # indexer_page_stride_size=512 -> G = indexer_layout_dim = 2048.
    # t = 120 + (120 // 60) * 4 = 128; t * P = 512 with P = 4; N = 2 -> (8 + 4 + 1) // 4 = 3.
    geo = DSAIndexerGeometry(layout, 4, 120, 60, page_size=4, page_num=2)
    assert geo.indexer_page_stride_size == 512
    assert geo.indexer_page_num == 3
    assert granularities(geo) == [2048]
    assert geo.buffers()[0].shape == (3, 4, 1, 512)  # docs/pools.md §2.5 (pages, L, 1, t*P)


@pytest.mark.parametrize("override", [None, 5])
def test_mla_page_first_direct_granularity_60(override: int | None) -> None:
    # docs/pools.md §3 test 2: page_num=4, L=3, P=2, C=5, fp16 -> G = P*L*C*b = 60.
    lora, rope = (3, 2) if override is None else (512, 64)
    geo = MLAGeometry("page_first_direct", 3, lora, rope, "fp16", 2, 4, override)
    assert geo.kv_cache_dim == 5
    assert granularities(geo) == [60]
    assert geo.buffers()[0].shape == (4, 3, 2, 1, 5)  # docs/pools.md §2.4 (N, L, P, 1, C)


def test_mla_page_first_also_60_and_layer_first_none() -> None:
    # docs/pools.md §2.4: both page-first layouts pass P*layout_dim; layer_first passes None.
    assert granularities(MLAGeometry("page_first", 3, 3, 2, "fp16", 2, 4)) == [60]
    assert granularities(MLAGeometry("layer_first", 3, 3, 2, "fp16", 2, 4)) == [None]


def test_mha_page_first_direct_granularity_96() -> None:
    # docs/pools.md §3 test 3: P=2, L=3, H=2, D=4, fp16 -> G = 96.
    geo = MHAGeometry("page_first_direct", 3, 2, 4, "fp16", 2, 4)
    assert granularities(geo) == [96]
    assert geo.buffers()[0].shape == (2, 4, 3, 2, 2, 4)  # docs/pools.md §2.1 (2, N, L, P, H, D)


@pytest.mark.parametrize(
    ("layout", "expected"), [("page_first", 96), ("layer_first", None), ("page_head", None)]
)
def test_mha_granularity_by_layout(layout: str, expected: int | None) -> None:
    # docs/pools.md §2.1 table: page_first P*layout_dim; layer_first and page_head None.
    assert granularities(MHAGeometry(layout, 3, 2, 4, "fp16", 2, 4)) == [expected]


@pytest.mark.parametrize("layout", BOTH)
def test_mamba_per_buffer_granularity(layout: str) -> None:
    # docs/pools.md §3 test 4: Lm=3, temporal (2,5) fp16, conv [(7,), (2,2)] fp32 -> [60, 84, 48].
    geo = MambaGeometry(layout, 3, (2, 5), "fp16", [(7,), (2, 2)], "float32", page_num=4)
    assert granularities(geo) == [60, 84, 48]
    assert [b.name for b in geo.buffers()] == ["temporal", "conv_0", "conv_1"]


@pytest.mark.parametrize("layout", BOTH)
def test_deepseek_v4_paged_granularity_33(layout: str) -> None:
    # docs/pools.md §3 test 5: 3 device buffers, item_bytes=11 -> G = 33.
    assert granularities(DeepSeekV4PagedGeometry(layout, 3, 11, 4, 8)) == [33]


@pytest.mark.parametrize("layout", BOTH)
def test_deepseek_v4_state_granularity_12(layout: str) -> None:
    # docs/pools.md §3 test 5: 2 state pools, ring_size=2, kv_score (4,3) uint8 -> G = 2*2*3 = 12.
    geo = DeepSeekV4StateGeometry(layout, [(4, 3), (4, 3)], 2, 4, 8)
    assert geo.state_page_bytes == 6
    assert granularities(geo) == [12]


def test_deepseek_v4_layer_first_is_one_allocation_per_layer_without_g() -> None:
    # docs/pools.md §2.7: layer_first = list of L allocations (num_host_pages, item_bytes), G None.
    geo = DeepSeekV4PagedGeometry("layer_first", 3, 11, 4, 8)
    assert granularities(geo) == [None, None, None]
    assert [b.shape for b in geo.buffers()] == [(8, 11)] * 3


@pytest.mark.parametrize("layout", BOTH)
def test_k_only_mha_granularity_120(layout: str) -> None:
    # docs/pools.md §3 test 6: P=2, L=3, H=2, D=5, fp16, layout_dim=60 -> G = 120.
    geo = KOnlyMHAGeometry(layout, 3, 2, 5, "fp16", 2, 4)
    assert geo.layout_dim == 60
    assert granularities(geo) == [120]


def test_k_only_mha_layer_first_none() -> None:
    # docs/pools.md §2.2 table: layer_first None.
    assert granularities(KOnlyMHAGeometry("layer_first", 3, 2, 5, "fp16", 2, 4)) == [None]


@pytest.mark.parametrize("layout", BOTH)
def test_asymmetric_mha_granularities_120_168(layout: str) -> None:
    # docs/pools.md §3 test 7: D=5, Dv=7, rest as test 6 -> two calls, G = [120, 168].
    geo = AsymmetricMHAGeometry(layout, 3, 2, 5, 7, "fp16", 2, 4)
    assert granularities(geo) == [120, 168]
    assert [b.name for b in geo.buffers()] == ["k_buffer", "v_buffer"]


def test_mla_kv_split_is_never_cuda_registered() -> None:
    # docs/pools.md §2.4: page_first_kv_split passes no G; the NPU allocator never registers.
    geo = MLAKVSplitGeometry(
        3, 4, 2, "bf16", 2, 4, index_layer_num=2, index_head_dim=8, index_scale=True
    )
    assert granularities(geo) == [None] * 4
    assert not any(buf.cuda_registered for buf in geo.buffers())
