"""SGLang 0.5.23's host pools, built from small stand-in device-pool descriptions.

Each builder constructs the real pool class (``pool_host/mha.py``, ``mla.py``) the way its
device pool would, with SGLang's own msgspec structs (``mem_cache/device_pool_info.py``) over
small CPU tensors, and returns the pool, its host buffers by name (``get_hybrid_pool_buffer``
order) and kvreg's geometry for them. ``pages`` is the host pool's page count (MHA and MLA get
it as ``host_token_capacity``, so no padding page is added).
"""

from __future__ import annotations

import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from kvreg.harness.pools import (
    AsymmetricMHAGeometry,
    DeepSeekV4PagedGeometry,
    DeepSeekV4StateGeometry,
    DSAIndexerGeometry,
    KOnlyMHAGeometry,
    MambaGeometry,
    MHAGeometry,
    MLAGeometry,
    PoolGeometry,
)

# layers, kv heads, K and V head dims, page size: wide tokens keep a TiB pool's token count,
# and so SGLang's own int64 free-slot list (HostKVCache.clear: torch.arange(size)), small
L, H, D, DV, P = 61, 8, 128, 64, 64
LORA, ROPE = 512, 64                          # DeepSeek's MLA row: 576 = 512 + 64
DTYPE = torch.bfloat16
DEVICE_TOKENS = P                             # the stand-in device pool's capacity


@dataclass
class Built:
    pool: Any
    buffers: dict[str, torch.Tensor]
    geometry: PoolGeometry


def load() -> types.SimpleNamespace:
    """Import the pool modules with the GPU-only stand-ins (gpu_stubs) in place."""
    import gpu_stubs

    gpu_stubs.install()
    from sglang.srt.mem_cache import device_pool_info, memory_pool_host
    from sglang.srt.mem_cache.pool_host import (
        base,
        common,
        dsa,
        host_pool_decl,
        mamba,
        mha,
        mla,
    )

    return types.SimpleNamespace(base=base, common=common, mha=mha, mla=mla, dsa=dsa,
                                 mamba=mamba, decl=host_pool_decl, info=device_pool_info,
                                 v4=memory_pool_host,
                                 gated=(base, mha, mla, dsa, mamba))


def _mha_info(sg: Any, v_head_dim: int = D) -> Any:
    info = sg.info
    k = tuple(torch.zeros(DEVICE_TOKENS, H, D, dtype=DTYPE) for _ in range(L))
    v = tuple(torch.zeros(DEVICE_TOKENS, H, v_head_dim, dtype=DTYPE) for _ in range(L))
    ptrs = torch.zeros(L, dtype=torch.uint64)
    return info.MHABufferInfo(
        buffers=info.KVBuffers(k=k, v=v, k_data_ptrs=ptrs, v_data_ptrs=ptrs,
                               layout=info.KVBufferLayout.NHD),
        page_size=P, head_num=H, head_dim=D, v_head_dim=v_head_dim, dtype=DTYPE,
        device=torch.device("cpu"))


def _mha_pool(sg: Any, cls: Any, layout: str, pages: int, *, v_head_dim: int = D,
              pin_memory: bool = True, **extra: Any) -> Any:
    return cls(_mha_info(sg, v_head_dim), 0, 0, P, layout, pin_memory=pin_memory,
               device="cpu", device_capacity_tokens=DEVICE_TOKENS, start_layer=0,
               end_layer=L - 1, host_token_capacity=pages * P, **extra)


def mha(sg: Any, layout: str, pages: int) -> Built:
    groups = 2 if layout == "page_unified" else 1
    pool = _mha_pool(sg, sg.mha.MHATokenToKVPoolHost, layout, pages,
                     **({"head_group_num": groups} if groups > 1 else {}))
    geo = MHAGeometry(layout, L, H, D, "bfloat16", P, pool.page_num,
                      **({"head_group_num": groups} if groups > 1 else {}))
    return Built(pool, {"kv_buffer": pool.kv_buffer}, geo)


def mha_asymmetric(sg: Any, layout: str, pages: int) -> Built:
    pool = _mha_pool(sg, sg.mha.AsymmetricMHATokenToKVPoolHost, layout, pages, v_head_dim=DV)
    geo = AsymmetricMHAGeometry(layout, L, H, D, DV, "bfloat16", P, pool.page_num)
    k, v = pool.kv_buffer
    return Built(pool, {"k_buffer": k, "v_buffer": v}, geo)


def mha_k_only(sg: Any, layout: str, pages: int) -> Built:
    # the anchor only lends its sizes: unpinned, it registers nothing
    anchor = _mha_pool(sg, sg.mha.MHATokenToKVPoolHost, "layer_first", pages, pin_memory=False)
    device_pool = types.SimpleNamespace(
        store_dtype=DTYPE, start_layer=0, end_layer=L - 1, head_num=H, head_dim=D, layer_num=L,
        k_buffer=[torch.zeros(DEVICE_TOKENS, H, D, dtype=DTYPE) for _ in range(L)],
        device="cpu")
    pool = sg.mha.MHATokenToKOnlyPoolHost(device_pool, anchor, layout, pin_memory=True)
    geo = KOnlyMHAGeometry(layout, L, H, D, "bfloat16", P, pool.page_num)
    return Built(pool, {"k_buffer": pool.k_buffer}, geo)


def _mla_pool(sg: Any, layout: str, pages: int, *, pin_memory: bool = True) -> Any:
    info = sg.info.MLABufferInfo(
        buffers=tuple(torch.zeros(DEVICE_TOKENS, 1, LORA + ROPE, dtype=DTYPE)
                      for _ in range(L)),
        data_ptrs=torch.zeros(L, dtype=torch.uint64), layer_indices=tuple(range(L)),
        device_layer_num=L, page_size=P, kv_lora_rank=LORA, qk_rope_head_dim=ROPE,
        kv_cache_dim=LORA + ROPE, dtype=DTYPE, device=torch.device("cpu"))
    return sg.mla.MLATokenToKVPoolHost(
        info, 0, 0, P, layout, pin_memory=pin_memory, device="cpu",
        device_capacity_tokens=DEVICE_TOKENS, start_layer=0, end_layer=L - 1,
        target_layer_num=L, host_token_capacity=pages * P)


INDEX_HEAD_DIM, QUANT_BLOCK = 128, 128        # DeepSeek V3.2's indexer: 132 bytes a token


def dsa_indexer(sg: Any, layout: str, pages: int) -> Built:
    # the MLA anchor only lends its sizes and layout: unpinned, it registers nothing
    anchor = _mla_pool(sg, layout, pages, pin_memory=False)
    per_token = INDEX_HEAD_DIM + INDEX_HEAD_DIM // QUANT_BLOCK * 4
    device_pool = types.SimpleNamespace(
        store_dtype=DTYPE, start_layer=0, end_layer=L - 1, layer_num=L,
        layer_shard_enabled=False, device="cpu", page_size=P,
        index_k_with_scale_buffer=[torch.zeros(DEVICE_TOKENS * per_token, dtype=torch.uint8)
                                   for _ in range(L)])
    decl = sg.decl.HostPoolDecl(
        pool_name=sg.decl.PoolName.INDEXER, device_pool=device_pool,
        indices_from_pool=sg.decl.PoolName.KV, layout_source=sg.decl.PoolName.KV,
        storage_info=sg.decl.HostPoolStorageInfo(bytes_per_token_per_layer=per_token,
                                                 dtype=torch.uint8),
        host_pool_builder=None)
    pool = sg.dsa.DSAIndexerPoolHost(decl, anchor, pin_memory=True)
    geo = DSAIndexerGeometry(layout, L, INDEX_HEAD_DIM, QUANT_BLOCK, page_size=P,
                             page_num=pool.page_num)
    return Built(pool, {"index_k_with_scale_buffer": pool.index_k_with_scale_buffer}, geo)


MAMBA_LAYERS = 48
TEMPORAL, CONV = (16, 64, 64), (3, 8192)      # float32 SSM state, bf16 conv state per layer


def mamba(sg: Any, layout: str, pages: int) -> Built:
    info = sg.info.MambaStateBufferInfo(
        temporal=torch.zeros(MAMBA_LAYERS, 1, *TEMPORAL, dtype=torch.float32),
        conv=(torch.zeros(MAMBA_LAYERS, 1, *CONV, dtype=DTYPE),))
    # a slot is a page (page_size 1) and SGLang adds one: size = capacity * ratio + 1
    pool = sg.mamba.MambaPoolHost(info, pages - 1, 0, device_capacity=1, pin_memory=True,
                                  layout=layout)
    geo = MambaGeometry(layout, MAMBA_LAYERS, TEMPORAL, "float32", [CONV], "bfloat16",
                        page_num=pool.page_num)
    return Built(pool, {"temporal": pool.temporal_buffer,
                        "conv_0": pool.conv_buffer[0]}, geo)


V4_ITEM_BYTES = 64 << 10                      # one page of one layer of a V4 paged sub-pool


def deepseek_v4_paged(sg: Any, layout: str, pages: int) -> Built:
    device = [torch.zeros(V4_ITEM_BYTES, dtype=torch.uint8) for _ in range(L)]
    pool = sg.v4.DeepSeekV4PagedHostPool("kv", device, V4_ITEM_BYTES, pages, P, layout=layout,
                                         pin_memory=True)
    geo = DeepSeekV4PagedGeometry(layout, L, V4_ITEM_BYTES, P, pages)
    tensors = pool.kv_buffer if isinstance(pool.kv_buffer, list) else [pool.kv_buffer]
    return Built(pool, dict(zip([b.name for b in geo.buffers()], tensors, strict=True)), geo)


RING, SCORE_SHAPE = 4, (16, 512)               # a V4 compress-state ring of uint8 score rows


def deepseek_v4_state(sg: Any, layout: str, pages: int) -> Built:
    state_pools = [types.SimpleNamespace(
        ring_size=RING,
        kv_score_buffer=types.SimpleNamespace(
            kv_score=torch.zeros(2 * RING, *SCORE_SHAPE, dtype=torch.uint8)))
        for _ in range(L)]
    pool = sg.v4.DeepSeekV4StateHostPool("state", state_pools, pages, P, layout=layout,
                                         pin_memory=True)
    geo = DeepSeekV4StateGeometry(layout, [(2 * RING, *SCORE_SHAPE)] * L, RING, P, pages)
    tensors = pool.kv_buffer if isinstance(pool.kv_buffer, list) else [pool.kv_buffer]
    return Built(pool, dict(zip([b.name for b in geo.buffers()], tensors, strict=True)), geo)


def mla(sg: Any, layout: str, pages: int) -> Built:
    pool = _mla_pool(sg, layout, pages)
    geo = MLAGeometry(layout, L, LORA, ROPE, "bfloat16", P, pool.page_num)
    return Built(pool, {"kv_buffer": pool.kv_buffer}, geo)


# every host pool type x layout of 0.5.23 that registers with cudaHostRegister
POOLS: dict[str, tuple[Callable[[Any, str, int], Built], tuple[str, ...]]] = {
    "mha": (mha, ("layer_first", "page_first", "page_first_direct", "page_head",
                  "page_unified")),
    "mha_asymmetric": (mha_asymmetric, ("page_first", "page_first_direct")),
    "mha_k_only": (mha_k_only, ("layer_first", "page_first", "page_first_direct")),
    "mla": (mla, ("layer_first", "page_first", "page_first_direct", "page_unified")),
    "dsa_indexer": (dsa_indexer, ("layer_first", "page_first", "page_first_direct")),
    "mamba": (mamba, ("page_first", "page_first_direct")),
    "deepseek_v4_paged": (deepseek_v4_paged, ("layer_first", "page_first",
                                              "page_first_direct")),
    "deepseek_v4_state": (deepseek_v4_state, ("layer_first", "page_first",
                                              "page_first_direct")),
}
CASES = [(kind, layout) for kind, (_, layouts) in POOLS.items() for layout in layouts]


def bytes_per_page(kind: str, layout: str) -> int:
    """Host bytes of one page of the pool (all its buffers)."""
    b = DTYPE.itemsize
    if kind == "mha":
        return 2 * P * L * H * D * b
    if kind == "mha_asymmetric":
        return P * L * H * (D + DV) * b
    if kind == "mha_k_only":
        return P * L * H * D * b
    if kind == "deepseek_v4_state":
        return L * RING * SCORE_SHAPE[0] * SCORE_SHAPE[1]
    if kind == "deepseek_v4_paged":
        return L * V4_ITEM_BYTES
    if kind == "mamba":
        return MAMBA_LAYERS * (4 * TEMPORAL[0] * TEMPORAL[1] * TEMPORAL[2]
                               + DTYPE.itemsize * CONV[0] * CONV[1])
    if kind == "dsa_indexer":
        return P * L * (INDEX_HEAD_DIM + INDEX_HEAD_DIM // QUANT_BLOCK * 4)
    return P * L * (LORA + ROPE) * b


def build(sg: Any, kind: str, layout: str, pages: int) -> Built:
    return POOLS[kind][0](sg, layout, pages)
