"""SGLang 0.5.23's page_unified layout (docs/pools.md §2.11): the geometry's numbers, its bad
input, and the catalog files that judge an implementation on it."""

from __future__ import annotations

import pytest

from kvreg.harness.pools import GeometryError, MHAGeometry, MLAGeometry, make_geometry
from kvreg.harness.run.core import run_scenario


def test_mha_block_holds_k_and_v_of_every_head_group() -> None:
    # P=2, L=3, H=4, D=8, fp16, HG=2: block = 2 groups * 3 layers * 2 (K,V) * 2 tokens * 2 heads
    # * 8 dims * 2 bytes = 768 = 2*P*L*H*D*b; shape (N, HG, L, 2, P, H/HG, D)
    geo = MHAGeometry("page_unified", 3, 4, 8, "fp16", 2, 5, head_group_num=2)
    (buf,) = geo.buffers()
    assert buf.shape == (5, 2, 3, 2, 2, 2, 8)
    assert buf.granularity == buf.copy_unit == 768
    assert buf.nbytes == 5 * 768
    assert not geo.has_page_meta     # 0.5.23 get_page_buffer_meta: "Unsupported layout"
    assert make_geometry("mha", **geo.params()).buffers() == geo.buffers()


def test_mha_head_groups_do_not_change_the_granularity() -> None:
    one = MHAGeometry("page_unified", 36, 8, 128, "bf16", 64, 4)
    four = MHAGeometry("page_unified", 36, 8, 128, "bf16", 64, 4, head_group_num=4)
    assert one.buffers()[0].granularity == four.buffers()[0].granularity == 9437184
    # twice page_first_direct's per-half page: the block carries both components
    half = MHAGeometry("page_first_direct", 36, 8, 128, "bf16", 64, 4).buffers()[0].granularity
    assert half is not None and 2 * half == 9437184


def test_mla_page_unified_has_page_first_direct_bytes_and_granularity() -> None:
    pfd = MLAGeometry("page_first_direct", 3, 3, 5, "fp16", 2, 4).buffers()[0]
    geo = MLAGeometry("page_unified", 3, 3, 5, "fp16", 2, 4)
    (buf,) = geo.buffers()
    assert buf.shape == (4, 3, 2, 8)            # (N, L, P, C)
    assert buf.nbytes == pfd.nbytes and buf.granularity == pfd.granularity == 96
    assert not geo.has_page_meta


@pytest.mark.parametrize(("make", "words"), [
    # the 16-byte row rule of PageUnifiedLayout.__post_init__: C=5 fp16 is a 10-byte row
    (lambda: MLAGeometry("page_unified", 3, 3, 2, "fp16", 2, 4), "10 bytes"),
    (lambda: MHAGeometry("page_unified", 3, 4, 2, "fp16", 2, 4, head_group_num=2),
     "multiple of 16"),
    (lambda: MHAGeometry("page_unified", 3, 6, 8, "fp16", 2, 4, head_group_num=4), "must divide"),
    (lambda: MHAGeometry("page_first", 3, 4, 8, "fp16", 2, 4, head_group_num=2),
     "page_unified only"),
    (lambda: MHAGeometry("page_unified", 3, 4, 8, "fp16", 2, 4, head_group_num=0),
     "head_group_num"),
    (lambda: make_geometry("mha_k_only", layout="page_unified", layer_num=3, head_num=4,
                           head_dim=8, dtype="fp16", page_size=2, page_num=4), "layout must be"),
])
def test_bad_page_unified_input_is_a_geometry_error(make, words: str) -> None:
    with pytest.raises(GeometryError, match=words):
        make()


@pytest.mark.parametrize("sid", ["mha/page_unified/above-limit", "mla/page_unified/above-limit",
                                 "mha/page_unified/head-groups-above-limit"])
def test_byte_seams_cut_a_page_block(sid: str, by_id, load_impl) -> None:
    # chunks of exactly the limit ignore G: the first seam lands inside a page block
    result = run_scenario(by_id[sid], load_impl("byte_offset_seams", "sglang"))
    assert result.verdict == "fail"
    assert "seams-aligned" in [v.rule for v in result.violations], result.violations


@pytest.mark.parametrize("sid", ["mha/page_unified/above-limit",
                                 "mha/page_unified/head-groups-above-limit",
                                 "mla/page_unified/last-partial-chunk"])
def test_upstream_chunking_passes_page_unified(sid: str, by_id, load_impl) -> None:
    result = run_scenario(by_id[sid], load_impl("sglang_upstream", "sglang"))
    assert result.verdict == "pass", result.violations
