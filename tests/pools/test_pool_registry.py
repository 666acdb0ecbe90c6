"""Registry, describe() and hybrid groups built from plain parameters."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kvreg.harness.pools import (
    POOL_TYPES,
    FastDeployGeometry,
    GeometryError,
    HostPoolGroup,
    MHAGeometry,
    MLAGeometry,
    PoolGeometry,
    accepted_params,
    make_geometry,
)


def test_registry_covers_every_pool_family() -> None:
    # docs/pools.md §2.1-§2.9 and docs/mooncake-verbs.md §2.3.
    assert set(POOL_TYPES) == {
        "mha", "mha_k_only", "mha_asymmetric", "mla", "mla_kv_split", "dsa_indexer", "mamba",
        "deepseek_v4_paged", "deepseek_v4_state", "fastdeploy", "group",
    }  # fmt: skip
    assert all(issubclass(cls, PoolGeometry) for cls in POOL_TYPES.values())
    assert accepted_params("mla")["override_kv_cache_dim"] is False
    assert accepted_params("mla")["layer_num"] is True


def test_describe_reports_registration_facts() -> None:
    geo = MHAGeometry("page_first", 80, 1, 128, "bf16", 64, 10)
    summary = json.loads(json.dumps(geo.describe()))
    (buf,) = summary["buffers"]
    assert buf["granularity"] == 1_310_720  # docs/pools.md §2.10
    assert buf["shape"] == [2, 640, 80, 1, 128]
    assert [r["name"] for r in buf["regions"]] == ["K half", "V half"]
    assert buf["regions"][1]["offset"] == summary["derived"]["v_offset"] == 80 * 640 * 128 * 2
    assert summary["derived"]["size_per_token"] == 1 * 128 * 80 * 2 * 2  # docs/pools.md §2.1


def test_group_from_plain_mappings_round_trips() -> None:
    # docs/pools.md §2.9: each member keeps its own buffers and G.
    spec = {
        "members": [
            {"pool_type": "mla", "layout": "page_first", "layer_num": 3, "kv_lora_rank": 4,
             "qk_rope_head_dim": 1, "dtype": "fp16", "page_size": 2, "page_num": 4},
            {"pool_type": "dsa_indexer", "layout": "page_first", "layer_num": 4,
             "index_head_dim": 120, "quant_block_size": 60, "page_size": 2, "page_num": 4},
        ],
        "roles": ["kv", "indexer"],
    }  # fmt: skip
    group = make_geometry("group", **spec)
    assert isinstance(group, HostPoolGroup)
    assert [b.granularity for b in group.buffers()] == [60, 1024]
    assert make_geometry("group", **json.loads(json.dumps(group.params()))) == group


def test_group_default_roles_are_unique() -> None:
    a = MLAGeometry("page_first", 3, 4, 1, "fp16", 2, 4)
    group = HostPoolGroup([a, a])
    assert group.roles == ("mla_0", "mla_1")
    with pytest.raises(GeometryError, match="roles must be unique"):
        HostPoolGroup([a, a], roles=["kv", "kv"])
    with pytest.raises(GeometryError, match="members"):
        HostPoolGroup([])


def test_group_extents_raise_when_a_member_has_no_meta() -> None:
    # docs/pools.md §4: a layer_first DSA indexer raises in get_page_buffer_meta.
    kv = MLAGeometry("layer_first", 3, 4, 1, "fp16", 2, 4)
    idx = make_geometry("dsa_indexer", layout="layer_first", layer_num=2, index_head_dim=8,
                        quant_block_size=4, page_size=2, page_num=4)  # fmt: skip
    group = HostPoolGroup([kv, idx])
    assert not group.has_page_meta
    with pytest.raises(GeometryError):
        group.page_extents()


def test_fastdeploy_from_max_model_len() -> None:
    # docs/mooncake-verbs.md §2.3: block_num = ceil(max_model_len / block_size).
    geo = FastDeployGeometry.from_max_model_len(
        8193, 64, num_layers=2, head_num=1, head_dim=8, dtype="fp16"
    )
    assert geo.page_num == 129


def test_extents_arrays_are_read_only_int64() -> None:
    ext = MHAGeometry("page_first", 2, 2, 4, "bf16", 2, 3).page_extents()
    for array in (ext.buffer, ext.offset, ext.size, ext.page):
        assert array.dtype == np.int64
        with pytest.raises(ValueError):
            array[0] = 1
