"""copy_unit per layout, checked against the device-transfer extents of docs/pools.md §5.

copy_unit is the block size such that every real transfer of a buffer stays inside one block
from the base. These tests build the §5 copy extents directly (not from the geometry's page
meta) and check them; where a smaller unit would be wrong, they show the transfer that breaks it.
"""

from __future__ import annotations

import numpy as np
import pytest

from kvreg.harness.pools import (
    DeepSeekV4PagedGeometry,
    DSAIndexerGeometry,
    FastDeployGeometry,
    MHAGeometry,
    MLAGeometry,
)

# L=3 H=2 D=4 bf16 P=4 N=5: H*D*b = 16, S = 20, layer slab S*H*D*b = 320, page P*L*H*D*b = 192,
# V half at L*S*H*D*b = 960.
L, H, D, B, P, N = 3, 2, 4, 2, 4, 5
S = N * P
TOKEN = H * D * B
SLAB = S * TOKEN
PAGE = P * L * TOKEN
HALF = L * SLAB


def inside_one_block(offset: np.ndarray, size: np.ndarray, unit: int) -> bool:
    return bool(np.array_equal(offset // unit, (offset + size - 1) // unit))


def test_mha_layer_first_unit_is_the_layer_slab() -> None:
    # docs/pools.md §5.2 transfer_kv_direct: per run of consecutive tokens and per layer one copy of
    # run_len * token_bytes; a run may cross pages but not a layer slab.
    geo = MHAGeometry("layer_first", L, H, D, "bf16", P, N)
    (buf,) = geo.buffers()
    assert buf.copy_unit == SLAB
    starts, lengths, layers, halves = np.meshgrid(
        np.arange(S), np.arange(1, S + 1), np.arange(L), np.arange(2), indexing="ij"
    )
    ok = starts + lengths <= S
    offset = (halves * HALF + layers * SLAB + starts * TOKEN)[ok]
    size = (lengths * TOKEN)[ok]
    assert inside_one_block(offset, size, buf.copy_unit)
    # A run over tokens P-1 and P crosses a page: a page-sized unit would be wrong.
    assert not inside_one_block(np.array([(P - 1) * TOKEN]), np.array([2 * TOKEN]), P * TOKEN)


@pytest.mark.parametrize("layout", ["page_first", "page_first_direct"])
def test_mha_page_first_unit_is_g(layout: str) -> None:
    geo = MHAGeometry(layout, L, H, D, "bf16", P, N)
    (buf,) = geo.buffers()
    assert buf.copy_unit == buf.granularity == PAGE
    pages, layers, halves = np.meshgrid(np.arange(N), np.arange(L), np.arange(2), indexing="ij")
    if layout == "page_first":
        # §5.1 kernel: per token per layer item_size at idx*layout_dim + layer*item_size;
        # staged write-back: whole pages of P*layout_dim at dst_idx*layout_dim.
        tok = np.arange(S)[:, None, None]
        off = halves[:1] * HALF + tok * L * TOKEN + layers[:1] * TOKEN
        assert inside_one_block(off.ravel(), np.full(off.size, TOKEN), PAGE)
        whole = halves[:, 0, :] * HALF + pages[:, 0, :] * P * L * TOKEN
        assert inside_one_block(whole.ravel(), np.full(whole.size, PAGE), PAGE)
    else:
        # §5.2: one descriptor per (page, layer, K/V) at base + page*stride0 + layer*stride1,
        # P*H*D*b bytes: a sub-block of one G page.
        off = halves * HALF + pages * PAGE + layers * P * TOKEN
        assert inside_one_block(off.ravel(), np.full(off.size, P * TOKEN), PAGE)


def test_mha_page_head_unit_is_one_page() -> None:
    # page_head (2, N, H, P, L, D): the kernel's per-head offsets stay inside a page (§5.1) and
    # L3 meta moves whole pages (§4); upstream registers in one call (G None, §2.1).
    geo = MHAGeometry("page_head", L, H, D, "bf16", P, N)
    (buf,) = geo.buffers()
    assert buf.granularity is None and buf.copy_unit == PAGE
    kv, n, h, p, layer = np.meshgrid(*(np.arange(k) for k in (2, N, H, P, L)), indexing="ij")
    elem = D * B  # one (token, head, layer) row of D elements
    off = kv * HALF + (((n * H + h) * P + p) * L + layer) * elem
    assert inside_one_block(off.ravel(), np.full(off.size, elem), PAGE)


def test_mla_layer_first_unit_is_the_layer_slab() -> None:
    # Same direct-io run rule as MHA (docs/pools.md §5.2), with token bytes C*b. C=5 fp16, S=20.
    geo = MLAGeometry("layer_first", L, 4, 1, "fp16", P, N)
    assert geo.buffers()[0].copy_unit == S * 5 * 2


def test_dsa_layer_first_unit_is_the_layer_slab() -> None:
    # docs/pools.md §2.5: rows of t*P bytes per layer, indexer_page_num rows per layer slab.
    geo = DSAIndexerGeometry("layer_first", L, 8, 4, P, N)
    t = 8 + 2 * 4
    assert geo.buffers()[0].copy_unit == geo.indexer_page_num * t * P


def test_deepseek_v4_layer_first_unit_is_each_allocation() -> None:
    # docs/pools.md §2.7: each layer is its own allocation registered in one call.
    geo = DeepSeekV4PagedGeometry("layer_first", 3, 11, 4, 5)
    assert [b.copy_unit for b in geo.buffers()] == [55, 55, 55]


def test_fastdeploy_unit_is_the_block_stride() -> None:
    # docs/mooncake-verbs.md §2.3: every key is one block (stride bytes) of the K or V half.
    geo = FastDeployGeometry(2, 2, 4, "bf16", 4, 3)
    assert {b.copy_unit for b in geo.buffers()} == {geo.cache_buffer_stride_bytes}
