"""MLA host pools: the latent KV cache (one buffer) and the NPU-only page_first_kv_split layout.

Facts: docs/pools.md §2.4 (MLATokenToKVPoolHost), §4 (get_page_buffer_meta), §5 (copy units).
"""

from __future__ import annotations

from typing import Any

from kvreg.fakes.dtypes import DType

from ._checks import (
    GeometryError,
    check_dtype,
    check_flag,
    check_layout,
    check_nonneg_int,
    check_positive_int,
)
from .base import BufferSpec, PoolGeometry, Slot, regions_in_order
from .page_unified import PAGE_UNIFIED, PageBlock

__all__ = ["MLAGeometry", "MLAKVSplitGeometry"]

LAYER_FIRST = "layer_first"
PAGE_FIRST = "page_first"
PAGE_FIRST_DIRECT = "page_first_direct"
KV_SPLIT = "page_first_kv_split"


class MLAGeometry(PoolGeometry):
    """MLATokenToKVPoolHost with C = override_kv_cache_dim or kv_lora_rank + qk_rope_head_dim.

    One buffer; G = P*layout_dim = P*L*C*b for page_first and page_first_direct (both, after the
    PR #26691 review crash), None for layer_first (docs/pools.md §2.4). page_unified (SGLang
    0.5.23) has page_first_direct's bytes as (N, L, P, C) with the same G (§2.11).
    page_first_kv_split is a different buffer set: use pool type "mla_kv_split".
    """

    pool_type = "mla"

    def __init__(
        self,
        layout: str,
        layer_num: int,
        kv_lora_rank: int,
        qk_rope_head_dim: int,
        dtype: DType | str | object,
        page_size: int,
        page_num: int,
        override_kv_cache_dim: int | None = None,
    ) -> None:
        self.layout = check_layout(
            self.pool_type,
            layout,
            (LAYER_FIRST, PAGE_FIRST, PAGE_FIRST_DIRECT, PAGE_UNIFIED),
            "docs/pools.md §2.4, §2.11; page_first_kv_split is pool type mla_kv_split",
        )
        self.layer_num = check_positive_int("layer_num", layer_num)
        self.kv_lora_rank = check_positive_int("kv_lora_rank", kv_lora_rank)
        self.qk_rope_head_dim = check_nonneg_int("qk_rope_head_dim", qk_rope_head_dim)
        self.dtype = check_dtype("dtype", dtype)
        self.page_size = check_positive_int("page_size", page_size)
        self.page_num = check_positive_int("page_num", page_num)
        self.override_kv_cache_dim = (
            None
            if override_kv_cache_dim is None
            else check_positive_int("override_kv_cache_dim", override_kv_cache_dim)
        )
        self.kv_cache_dim = self.override_kv_cache_dim or (
            self.kv_lora_rank + self.qk_rope_head_dim
        )
        self.size = self.page_num * self.page_size
        self.token_stride_size = self.kv_cache_dim * int(self.dtype.itemsize)  # C*b
        self.layout_dim = self.token_stride_size * self.layer_num  # C*b*L
        self.page_bytes = self.page_size * self.layout_dim  # P*L*C*b
        self.layer_slab = self.size * self.token_stride_size  # S*C*b
        L, P, N, S, C = self.layer_num, self.page_size, self.page_num, self.size, self.kv_cache_dim
        if self.layout == LAYER_FIRST:
            # Direct io copies runs of consecutive tokens inside one layer slab (docs/pools.md
            # §5.2), and a run may cross pages: the copy unit is the layer slab S*C*b.
            buf = BufferSpec(
                "kv_buffer",
                (L, S, 1, C),
                self.dtype,
                None,
                self.layer_slab,
                regions_in_order(*[(f"layer {i}", self.layer_slab) for i in range(L)]),
            )
        else:
            if self.layout == PAGE_UNIFIED:
                # checks the 16-byte row rule; the block is exactly one page (docs/pools.md §2.11)
                block = PageBlock(P, L, 1, 1, C, int(self.dtype.itemsize), is_mla=True)
                shape = block.dims(N)
            else:
                shape = (S, L, 1, C) if self.layout == PAGE_FIRST else (N, L, P, 1, C)
            buf = BufferSpec(
                "kv_buffer",
                shape,
                self.dtype,
                self.page_bytes,
                self.page_bytes,
                regions_in_order(("pages", N * self.page_bytes)),
            )
        self._buffers = (buf,)

    @property
    def page_count(self) -> int:
        return self.page_num

    @property
    def has_page_meta(self) -> bool:
        # 0.5.23's get_page_buffer_meta raises "Unsupported layout" for page_unified (§2.11)
        return self.layout != PAGE_UNIFIED

    def buffers(self) -> tuple[BufferSpec, ...]:
        return self._buffers

    def params(self) -> dict[str, Any]:
        return {
            "layout": self.layout,
            "layer_num": self.layer_num,
            "kv_lora_rank": self.kv_lora_rank,
            "qk_rope_head_dim": self.qk_rope_head_dim,
            "dtype": self.dtype.name,
            "page_size": self.page_size,
            "page_num": self.page_num,
            "override_kv_cache_dim": self.override_kv_cache_dim,
        }

    def derived(self) -> dict[str, Any]:
        return {
            "size": self.size,
            "kv_cache_dim": self.kv_cache_dim,
            "size_per_token": self.layout_dim,  # C*b*L (docs/pools.md §2.4)
            "token_stride_size": self.token_stride_size,
            "layout_dim": self.layout_dim,
            "page_bytes": self.page_bytes,
        }

    def _page_slots(self) -> tuple[Slot, ...]:
        if self.layout == LAYER_FIRST:
            # docs/pools.md §4: per layer, base + idx*C*b + l*S*C*b, size P*C*b.
            per_page = self.page_size * self.token_stride_size
            return tuple(
                Slot(0, layer * self.layer_slab, per_page, per_page)
                for layer in range(self.layer_num)
            )
        # docs/pools.md §4: base + idx*L*C*b, size L*P*C*b.
        return (Slot(0, 0, self.page_bytes, self.page_bytes),)


class MLAKVSplitGeometry(PoolGeometry):
    """MLA page_first_kv_split (Ascend/NPU only): k, v and optional index_k / scale buffers.

    The NPU allocator pins with torch and never calls cudaHostRegister, so every buffer has
    granularity None and cuda_registered False (docs/pools.md §2.4). k_width defaults to
    kv_lora_rank; for FP8 DSA it is the device pool's packed kv_cache_dim and must be given, and
    the page meta then has no v pointer (docs/pools.md §4).
    """

    pool_type = "mla_kv_split"

    def __init__(
        self,
        layer_num: int,
        kv_lora_rank: int,
        qk_rope_head_dim: int,
        dtype: DType | str | object,
        page_size: int,
        page_num: int,
        k_width: int | None = None,
        k_dtype: DType | str | object | None = None,
        fp8_dsa: bool = False,
        index_layer_num: int = 0,
        index_head_dim: int = 0,
        index_dtype: DType | str | object | None = None,
        index_scale: bool = False,
    ) -> None:
        self.layout = KV_SPLIT
        self.layer_num = check_positive_int("layer_num", layer_num)
        self.kv_lora_rank = check_positive_int("kv_lora_rank", kv_lora_rank)
        self.qk_rope_head_dim = check_positive_int("qk_rope_head_dim", qk_rope_head_dim)
        self.dtype = check_dtype("dtype", dtype)
        self.page_size = check_positive_int("page_size", page_size)
        self.page_num = check_positive_int("page_num", page_num)
        self.fp8_dsa = check_flag("fp8_dsa", fp8_dsa)
        if self.fp8_dsa and k_width is None:
            raise GeometryError("k_width must be given (the packed kv_cache_dim) when fp8_dsa")
        self.k_width = (
            self.kv_lora_rank if k_width is None else check_positive_int("k_width", k_width)
        )
        self.k_dtype = self.dtype if k_dtype is None else check_dtype("k_dtype", k_dtype)
        self.index_layer_num = check_nonneg_int("index_layer_num", index_layer_num)
        self.index_scale = check_flag("index_scale", index_scale)
        if self.index_layer_num:
            self.index_head_dim = check_positive_int("index_head_dim", index_head_dim)
        else:
            self.index_head_dim = check_nonneg_int("index_head_dim", index_head_dim)
            if self.index_scale:
                raise GeometryError("index_scale needs index_layer_num > 0 (scale of index_k)")
        self.index_dtype = (
            self.dtype if index_dtype is None else check_dtype("index_dtype", index_dtype)
        )
        self.size = self.page_num * self.page_size
        self._buffers = self._make_buffers()

    def _make_buffers(self) -> tuple[BufferSpec, ...]:
        """k (N,L,P,1,k_width); v (N,L,P,1,rope); index_k (N,L_idx,P,1,ihd); scale (N,L_idx,P,1,1)
        fp32 (docs/pools.md §2.4). Transfers are whole pages, so copy_unit is one page (§4)."""
        N, L, P, Li = self.page_num, self.layer_num, self.page_size, self.index_layer_num
        parts: list[tuple[str, tuple[int, ...], DType]] = [
            ("k_buffer", (N, L, P, 1, self.k_width), self.k_dtype),
            ("v_buffer", (N, L, P, 1, self.qk_rope_head_dim), self.dtype),
        ]
        if Li:
            parts.append(("index_k_buffer", (N, Li, P, 1, self.index_head_dim), self.index_dtype))
        if self.index_scale:
            parts.append(("index_scale_buffer", (N, Li, P, 1, 1), check_dtype("scale", "float32")))
        buffers = []
        for name, shape, dtype in parts:
            page = (shape[1] * shape[2] * shape[4]) * int(dtype.itemsize)
            buffers.append(
                BufferSpec(
                    name,
                    shape,
                    dtype,
                    None,
                    page,
                    regions_in_order(("pages", N * page)),
                    cuda_registered=False,
                )
            )
        return tuple(buffers)

    @property
    def page_count(self) -> int:
        return self.page_num

    def buffers(self) -> tuple[BufferSpec, ...]:
        return self._buffers

    def params(self) -> dict[str, Any]:
        return {
            "layer_num": self.layer_num,
            "kv_lora_rank": self.kv_lora_rank,
            "qk_rope_head_dim": self.qk_rope_head_dim,
            "dtype": self.dtype.name,
            "page_size": self.page_size,
            "page_num": self.page_num,
            "k_width": self.k_width,
            "k_dtype": self.k_dtype.name,
            "fp8_dsa": self.fp8_dsa,
            "index_layer_num": self.index_layer_num,
            "index_head_dim": self.index_head_dim,
            "index_dtype": self.index_dtype.name,
            "index_scale": self.index_scale,
        }

    def derived(self) -> dict[str, Any]:
        # docs/pools.md §2.4: C*b*L, plus index_head_dim*b*n_idx_layers with an indexer and
        # 4*n_idx_layers with a scale buffer (b is the pool dtype's itemsize, as upstream).
        b = int(self.dtype.itemsize)
        spt = (self.kv_lora_rank + self.qk_rope_head_dim) * b * self.layer_num
        spt += self.index_head_dim * b * self.index_layer_num
        spt += 4 * self.index_layer_num if self.index_scale else 0
        return {"size": self.size, "size_per_token": spt, "cuda_registered": False}

    def _page_slots(self) -> tuple[Slot, ...]:
        # docs/pools.md §4: k, v unless FP8 DSA, index_k, scale; each one page of its buffer.
        slots = []
        for index, buf in enumerate(self._buffers):
            if buf.name == "v_buffer" and self.fp8_dsa:
                continue
            slots.append(Slot(index, 0, buf.copy_unit, buf.copy_unit))
        return tuple(slots)
