"""Page extents against the docs/pools.md §4 formulas, on small pools computed by hand."""

from __future__ import annotations

import numpy as np
import pytest

from kvreg.harness.pools import (
    AsymmetricMHAGeometry,
    DeepSeekV4PagedGeometry,
    DeepSeekV4StateGeometry,
    DSAIndexerGeometry,
    FastDeployGeometry,
    GeometryError,
    HostPoolGroup,
    KOnlyMHAGeometry,
    MambaGeometry,
    MHAGeometry,
    MLAGeometry,
    MLAKVSplitGeometry,
    NoPageMetaError,
    PageExtents,
)

Row = tuple[int, int, int]  # (buffer, offset, size)


def rows(ext: PageExtents) -> list[Row]:
    return list(zip(ext.buffer.tolist(), ext.offset.tolist(), ext.size.tolist(), strict=True))


def test_mha_layer_first_k_then_v_per_layer() -> None:
    # docs/pools.md §4: per layer l, K = idx*H*D*b + l*S*H*D*b, then V = K + L*S*H*D*b; size
    # P*H*D*b.
    # L=2 H=1 D=2 fp16 P=2 N=3: S=6, H*D*b=4, layer slab 24, V at 48, page p -> idx*4 = 8p.
    geo = MHAGeometry("layer_first", 2, 1, 2, "fp16", 2, 3)
    assert geo.v_offset == 48
    ext = geo.page_extents([1])
    assert rows(ext) == [(0, 8, 8), (0, 56, 8), (0, 32, 8), (0, 80, 8)]
    assert ext.page.tolist() == [1, 1, 1, 1]


@pytest.mark.parametrize("layout", ["page_first", "page_first_direct", "page_head"])
def test_mha_page_layouts_k_and_v_whole_pages(layout: str) -> None:
    # docs/pools.md §4 / docs/mooncake-verbs.md §3.4: K = idx*L*H*D*b, V = K + L*S*H*D*b, size
    # L*P*H*D*b.
    # L=2 H=1 D=2 fp16 P=2 N=3: page 16 B, V half at 48.
    geo = MHAGeometry(layout, 2, 1, 2, "fp16", 2, 3)
    assert rows(geo.page_extents([2, 0])) == [(0, 32, 16), (0, 80, 16), (0, 0, 16), (0, 48, 16)]


def test_mha_v_pointer_is_k_plus_half_for_every_page() -> None:
    # docs/pools.md §2.1: the V half starts at L*S*H*D*b in every layout.
    for layout in ("layer_first", "page_first", "page_first_direct", "page_head"):
        geo = MHAGeometry(layout, 3, 2, 4, "bf16", 4, 5)
        ext = geo.page_extents()
        assert np.array_equal(ext.offset[1::2], ext.offset[0::2] + 3 * 20 * 2 * 4 * 2)


def test_mha_page_head_split_heads() -> None:
    # docs/pools.md §4: per head group h (step H/f): K = idx*L*H*D*b + h*P*L*D*b, V = K + L*S*H*D*b,
    # size L*P*H*D*b/f. L=2 H=4 D=2 bf16 P=4 N=3: page 128, P*L*D*b = 32, V at 384, f=2.
    geo = MHAGeometry("page_head", 2, 4, 2, "bf16", 4, 3)
    got = rows(geo.split_heads_page_extents(2, [1]))
    assert got == [(0, 128, 64), (0, 512, 64), (0, 192, 64), (0, 576, 64)]
    with pytest.raises(GeometryError, match="factor"):
        geo.split_heads_page_extents(3)


def test_k_only_page_first() -> None:
    # docs/pools.md §4: base + idx*L*H*D*b, size L*P*H*D*b (16 B here, no V).
    geo = KOnlyMHAGeometry("page_first_direct", 2, 1, 2, "fp16", 2, 3)
    assert rows(geo.page_extents()) == [(0, 0, 16), (0, 16, 16), (0, 32, 16)]


def test_k_only_and_dsa_layer_first_have_no_page_meta() -> None:
    # docs/pools.md §4: "layer_first raises" for K-only and the DSA indexer.
    for geo in (
        KOnlyMHAGeometry("layer_first", 2, 1, 2, "fp16", 2, 3),
        DSAIndexerGeometry("layer_first", 2, 8, 4, 2, 3),
    ):
        assert not geo.has_page_meta
        with pytest.raises(NoPageMetaError):
            geo.page_extents()


@pytest.mark.parametrize("layout", ["page_first", "page_first_direct"])
def test_asymmetric_k_and_v_in_separate_buffers(layout: str) -> None:
    # docs/pools.md §4: K = kbase + idx*L*H*D*b, V = vbase + idx*L*H*Dv*b.
    # L=2 H=1 D=2 Dv=3 fp16 P=2: K page 16, V page 24.
    geo = AsymmetricMHAGeometry(layout, 2, 1, 2, 3, "fp16", 2, 3)
    assert rows(geo.page_extents([1])) == [(0, 16, 16), (1, 24, 24)]


def test_mla_layer_first_per_layer() -> None:
    # docs/pools.md §4: base + idx*C*b + l*S*C*b, size P*C*b. L=2 C=3 fp16 P=2 N=3: S*C*b = 36.
    geo = MLAGeometry("layer_first", 2, 2, 1, "fp16", 2, 3)
    assert rows(geo.page_extents([2])) == [(0, 24, 12), (0, 60, 12)]


@pytest.mark.parametrize("layout", ["page_first", "page_first_direct"])
def test_mla_page_layouts(layout: str) -> None:
    # docs/pools.md §4: base + idx*L*C*b, size L*P*C*b = 24.
    geo = MLAGeometry(layout, 2, 2, 1, "fp16", 2, 3)
    assert rows(geo.page_extents([2])) == [(0, 48, 24)]


def test_mla_kv_split_pointer_order() -> None:
    # docs/pools.md §4: k (L*P*k_width*kb), v (L*P*rope*b), index_k (L_idx*P*ihd*ib),
    # scale (L_idx*4*P). L=2 lora=3 rope=1 bf16 P=2; L_idx=1 ihd=4 fp8.
    geo = MLAKVSplitGeometry(
        2,
        3,
        1,
        "bf16",
        2,
        3,
        index_layer_num=1,
        index_head_dim=4,
        index_dtype="fp8",
        index_scale=True,
    )
    assert rows(geo.page_extents([1])) == [(0, 24, 24), (1, 8, 8), (2, 8, 8), (3, 8, 8)]
    # FP8 DSA: k is the packed kv_cache_dim in uint8 and no v pointer (docs/pools.md §4).
    fp8 = MLAKVSplitGeometry(
        2,
        3,
        1,
        "bf16",
        2,
        3,
        k_width=5,
        k_dtype="uint8",
        fp8_dsa=True,
        index_layer_num=1,
        index_head_dim=4,
        index_dtype="fp8",
        index_scale=True,
    )
    assert rows(fp8.page_extents([1])) == [(0, 20, 20), (2, 8, 8), (3, 8, 8)]


@pytest.mark.parametrize("layout", ["page_first", "page_first_direct"])
def test_dsa_indexer_page_rows(layout: str) -> None:
    # docs/pools.md §4: base + (idx//P)*(L*t*P), size L*t*P. L=2 ihd=8 qbs=4 -> t=16; P=2 -> 64.
    geo = DSAIndexerGeometry(layout, 2, 8, 4, 2, 3)
    assert rows(geo.page_extents([2])) == [(0, 128, 64)]
    assert geo.buffers()[0].nbytes == 4 * 64  # indexer_page_num = (6+3)//2 = 4 rows


def test_mamba_per_slot_temporal_then_conv() -> None:
    # docs/pools.md §4: temporal tbase + i*Lm*prod(T)*tb, then conv_j cbase_j + i*Lm*prod(C_j)*cb.
    # Lm=2, T=(3,) fp16 -> 12 B; C=(2,) fp32 -> 16 B; slot 3.
    geo = MambaGeometry("page_first", 2, (3,), "fp16", [(2,)], "fp32", 5)
    assert rows(geo.page_extents([3])) == [(0, 36, 12), (1, 48, 16)]


def test_mamba_empty_temporal_is_skipped() -> None:
    # docs/pools.md §2.6/§4: a zero-element temporal buffer is never registered and has no pointer.
    geo = MambaGeometry("page_first_direct", 2, (0,), "fp16", [(2,)], "fp32", 5)
    temporal = geo.buffers()[0]
    assert temporal.nbytes == 0 and not temporal.cuda_registered and temporal.granularity is None
    assert rows(geo.page_extents([3])) == [(1, 48, 16)]


def test_deepseek_v4_paged_extents() -> None:
    # docs/pools.md §4: layer_first per layer kv_buffer[l] + row*item_bytes; page-first one row of
    # L*item_bytes. L=3, item_bytes=11, page 2.
    lf = DeepSeekV4PagedGeometry("layer_first", 3, 11, 4, 5)
    assert rows(lf.page_extents([2])) == [(0, 22, 11), (1, 22, 11), (2, 22, 11)]
    pf = DeepSeekV4PagedGeometry("page_first", 3, 11, 4, 5)
    assert rows(pf.page_extents([2])) == [(0, 66, 33)]


def test_deepseek_v4_state_extents() -> None:
    # docs/pools.md §4: state_page_bytes = ring 2 * kv_score[0].nbytes 3 = 6; L=2 pools; page 3.
    lf = DeepSeekV4StateGeometry("layer_first", [(4, 3), (9, 3)], 2, 4, 5)
    assert rows(lf.page_extents([3])) == [(0, 18, 6), (1, 18, 6)]
    pf = DeepSeekV4StateGeometry("page_first_direct", [(4, 3), (4, 3)], 2, 4, 5)
    assert rows(pf.page_extents([3])) == [(0, 36, 12)]


def test_fastdeploy_k_blocks_then_v_blocks() -> None:
    # docs/mooncake-verbs.md §2.3: stride = L*H*block_size*D*item = 3*2*4*4*2 = 192; total =
    # block_num*stride*2 = 1152, V half at 576; keys = k_keys + v_keys.
    geo = FastDeployGeometry(2, 2, 4, "bf16", 4, 3, num_extra_layers=1)
    assert geo.cache_buffer_stride_bytes == 192
    assert [b.nbytes for b in geo.buffers()] == [1152, 1152]
    read = [(0, 0, 192), (0, 384, 192), (0, 576, 192), (0, 960, 192)]
    assert rows(geo.page_extents([0, 2], side="read")) == read
    write = [(1, o, s) for _, o, s in read]
    assert rows(geo.page_extents([0, 2])) == read + write


def test_fastdeploy_scale_keys_follow_kv_keys() -> None:
    # docs/mooncake-verbs.md §2.3: scale stride = L*H*block_size*scale_item_bytes, two halves too.
    geo = FastDeployGeometry(1, 2, 4, "block_wise_fp8", 4, 2, scale_item_bytes=4)
    assert geo.cache_buffer_stride_bytes == 32 and geo.scale_buffer_stride_bytes == 32
    names = [b.name for b in geo.buffers()]
    assert names == ["read", "write", "read_scale", "write_scale"]
    got = rows(geo.page_extents([1], side="read"))
    assert got == [(0, 32, 32), (0, 96, 32), (2, 32, 32), (2, 96, 32)]


def test_group_offsets_buffer_indices() -> None:
    # docs/pools.md §2.9: each member keeps its own buffers; page meta is concatenated per pool.
    kv = MLAGeometry("page_first", 2, 2, 1, "fp16", 2, 3)
    idx = DSAIndexerGeometry("page_first", 2, 8, 4, 2, 3)
    mamba = MambaGeometry("page_first", 2, (3,), "fp16", [(2,)], "fp32", 5)
    group = HostPoolGroup([kv, idx, mamba], roles=["kv", "indexer", "mamba"])
    names = [b.name for b in group.buffers()]
    assert names == [
        "kv/kv_buffer",
        "indexer/index_k_with_scale_buffer",
        "mamba/temporal",
        "mamba/conv_0",
    ]
    got = rows(group.page_extents([2]))
    assert got == [(0, 48, 24), (1, 128, 64), (2, 24, 12), (3, 32, 16)]
    assert group.page_count == 3 and group.layout == "page_first"
