"""Impossible geometries raise GeometryError (a ValueError) naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from kvreg.fakes.dtypes import as_dtype
from kvreg.harness.pools import (
    BufferSpec,
    GeometryError,
    MHAGeometry,
    NoPageMetaError,
    Region,
    make_geometry,
)

VALID: dict[str, dict[str, Any]] = {
    "mha": dict(layout="page_first", layer_num=2, head_num=2, head_dim=4, dtype="bf16",
                page_size=2, page_num=3),
    "mha_k_only": dict(layout="page_first", layer_num=2, head_num=2, head_dim=4, dtype="bf16",
                       page_size=2, page_num=3),
    "mha_asymmetric": dict(layout="page_first", layer_num=2, head_num=2, head_dim=4,
                           v_head_dim=3, dtype="bf16", page_size=2, page_num=3),
    "mla": dict(layout="page_first", layer_num=2, kv_lora_rank=4, qk_rope_head_dim=2,
                dtype="bf16", page_size=2, page_num=3),
    "mla_kv_split": dict(layer_num=2, kv_lora_rank=4, qk_rope_head_dim=2, dtype="bf16",
                         page_size=2, page_num=3),
    "dsa_indexer": dict(layout="page_first", layer_num=2, index_head_dim=8,
                        quant_block_size=4, page_size=2, page_num=3),
    "mamba": dict(layout="page_first", num_mamba_layers=2, temporal_shape=[2, 3],
                  temporal_dtype="fp16", conv_shapes=[[4]], conv_dtype="fp32", page_num=3),
    "deepseek_v4_paged": dict(layout="page_first", layer_num=2, item_bytes=8, page_size=2,
                              page_num=3),
    "deepseek_v4_state": dict(layout="page_first", kv_score_shapes=[[4, 3]], ring_size=2,
                              page_size=2, page_num=3),
    "fastdeploy": dict(num_layers=2, head_num=2, head_dim=4, dtype="bf16", page_size=2,
                       page_num=3),
}  # fmt: skip

# C = kv_lora_rank + 0 is a valid MLA width (docs/pools.md §2.4), so rope may be 0.
ZERO_ALLOWED = {("mla", "qk_rope_head_dim")}
BAD_DIMS = [
    (pool, name, bad)
    for pool, params in VALID.items()
    for name, value in params.items()
    if isinstance(value, int) and not isinstance(value, bool)
    for bad in (0, -3, True)
    if not (bad == 0 and (pool, name) in ZERO_ALLOWED)
]


def test_valid_baselines_build() -> None:
    for pool, params in VALID.items():
        assert make_geometry(pool, **params).pool_type == pool


@pytest.mark.parametrize(("pool", "name", "bad"), BAD_DIMS)
def test_non_positive_dims_name_the_field(pool: str, name: str, bad: object) -> None:
    params = dict(VALID[pool], **{name: bad})
    with pytest.raises(GeometryError, match=name) as info:
        make_geometry(pool, **params)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("pool", "field", "bad"),
    [
        ("mamba", "conv_shapes[0][0]", [[0]]),
        ("mamba", "temporal_shape[1]", [2, -1]),
        ("deepseek_v4_state", "kv_score_shapes[0][1]", [[4, 0]]),
    ],
)
def test_bad_shapes_name_the_dimension(pool: str, field: str, bad: object) -> None:
    key = field.split("[")[0]
    with pytest.raises(GeometryError, match=field.replace("[", r"\[").replace("]", r"\]")):
        make_geometry(pool, **dict(VALID[pool], **{key: bad}))


@pytest.mark.parametrize(
    ("pool", "layout"),
    [
        ("mha_asymmetric", "layer_first"),  # docs/pools.md §2.3: upstream raises ValueError
        ("mha_asymmetric", "page_head"),
        ("mha_k_only", "page_head"),  # docs/pools.md §2.2 table has no page_head
        ("mla", "page_head"),
        ("mla", "page_first_kv_split"),  # a different buffer set: pool type mla_kv_split
        ("dsa_indexer", "page_head"),
        ("mamba", "layer_first"),  # docs/pools.md §2.6: asserts page_first(_direct)
        ("deepseek_v4_paged", "page_head"),
        ("mha", "pagefirst"),
    ],
)
def test_unsupported_layout(pool: str, layout: str) -> None:
    with pytest.raises(GeometryError, match="layout must be one of"):
        make_geometry(pool, **dict(VALID[pool], layout=layout))


def test_kv_split_hint_names_the_right_pool_type() -> None:
    with pytest.raises(GeometryError, match="mla_kv_split"):
        make_geometry("mla", **dict(VALID["mla"], layout="page_first_kv_split"))


@pytest.mark.parametrize("field", ["dtype", "temporal_dtype", "conv_dtype"])
def test_unknown_dtype(field: str) -> None:
    pool = "mha" if field == "dtype" else "mamba"
    with pytest.raises(GeometryError, match=field):
        make_geometry(pool, **dict(VALID[pool], **{field: "float13"}))


def test_unknown_pool_type_lists_known_ones() -> None:
    with pytest.raises(GeometryError, match=r"pool_type must be one of .*mha"):
        make_geometry("mqa", layer_num=1)


def test_unknown_param_is_named_and_accepted_listed() -> None:
    with pytest.raises(GeometryError, match=r"unknown parameter 'head_dims'.*accepted: layout"):
        make_geometry("mha", **dict(VALID["mha"], head_dims=4))


def test_missing_param_is_named() -> None:
    params = dict(VALID["mla"])
    del params["kv_lora_rank"]
    with pytest.raises(GeometryError, match="missing parameter 'kv_lora_rank'"):
        make_geometry("mla", **params)


def test_fastdeploy_dtype_rules() -> None:
    # docs/mooncake-verbs.md §2.3 item bytes: float32, bf16/fp16, uint8/block_wise_fp8 only.
    with pytest.raises(GeometryError, match="dtype must be one of"):
        make_geometry("fastdeploy", **dict(VALID["fastdeploy"], dtype="int32"))
    with pytest.raises(GeometryError, match="scale_item_bytes"):
        make_geometry("fastdeploy", **dict(VALID["fastdeploy"], dtype="block_wise_fp8"))
    with pytest.raises(GeometryError, match="scale_item_bytes"):
        make_geometry("fastdeploy", **dict(VALID["fastdeploy"], scale_item_bytes=4))


def test_state_pools_must_agree_on_page_bytes() -> None:
    # docs/pools.md §2.7: state_page_bytes must be equal across pools.
    params = dict(VALID["deepseek_v4_state"], kv_score_shapes=[[4, 3], [4, 5]])
    with pytest.raises(GeometryError, match="state_page_bytes must be equal"):
        make_geometry("deepseek_v4_state", **params)


def test_mamba_without_bytes_and_kv_split_flags() -> None:
    with pytest.raises(GeometryError, match="no bytes"):
        make_geometry("mamba", **dict(VALID["mamba"], temporal_shape=[0], conv_shapes=[]))
    with pytest.raises(GeometryError, match="k_width"):
        make_geometry("mla_kv_split", **dict(VALID["mla_kv_split"], fp8_dsa=True))
    with pytest.raises(GeometryError, match="index_scale"):
        make_geometry("mla_kv_split", **dict(VALID["mla_kv_split"], index_scale=True))
    with pytest.raises(GeometryError, match="fp8_dsa"):
        make_geometry("mla_kv_split", **dict(VALID["mla_kv_split"], fp8_dsa="false"))


def test_pages_out_of_range_or_not_integers() -> None:
    geo = MHAGeometry("page_first", 2, 2, 4, "bf16", 2, 3)
    with pytest.raises(GeometryError, match=r"pages must lie in \[0, 3\)"):
        geo.page_extents([3])
    with pytest.raises(GeometryError, match="pages must be a 1-D integer array"):
        geo.page_extents([0.5])
    assert len(geo.page_extents([])) == 0


def test_no_page_meta_is_a_geometry_error() -> None:
    geo = make_geometry("mha_k_only", **dict(VALID["mha_k_only"], layout="layer_first"))
    with pytest.raises(NoPageMetaError, match="layer_first"):
        geo.page_extents()
    assert issubclass(NoPageMetaError, GeometryError)


def test_sizing_classmethods_refuse_pools_sized_otherwise() -> None:
    # V4 pools size from a memory budget (docs/pools.md §2.7); FastDeploy from max_model_len.
    with pytest.raises(GeometryError, match="page_num"):
        make_geometry("deepseek_v4_paged", **VALID["deepseek_v4_paged"]).from_size(10, 2)
    with pytest.raises(GeometryError, match="max_model_len"):
        make_geometry("fastdeploy", **VALID["fastdeploy"]).from_size(10, 2)


def test_buffer_spec_rejects_regions_that_do_not_tile() -> None:
    u8 = as_dtype("uint8")
    with pytest.raises(GeometryError, match="regions"):
        BufferSpec("x", (8,), u8, None, 8, (Region("a", 0, 4),))
    with pytest.raises(GeometryError, match="regions"):
        BufferSpec("x", (8,), u8, None, 8, (Region("a", 0, 4), Region("b", 5, 3)))
    with pytest.raises(GeometryError, match="copy_unit"):
        BufferSpec("x", (8,), u8, None, 0, (Region("a", 0, 8),))
