"""MHA host pools: symmetric K+V (one allocation), K-only, and asymmetric K/V (two allocations).

Facts: docs/pools.md §2.1 (MHATokenToKVPoolHost), §2.2 (MHATokenToKOnlyPoolHost), §2.3
(AsymmetricMHATokenToKVPoolHost), §4 (get_page_buffer_meta), §5 (transfer paths, copy units);
docs/mooncake-verbs.md §3.4 (pointer lists per layout).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy.typing as npt

from kvreg.fakes.dtypes import DType

from ._checks import GeometryError, check_dtype, check_layout, check_positive_int
from .base import (
    BufferSpec,
    PageExtents,
    PoolGeometry,
    Region,
    Slot,
    extents_from_slots,
    regions_in_order,
)
from .page_unified import PAGE_UNIFIED, PageBlock

__all__ = ["AsymmetricMHAGeometry", "KOnlyMHAGeometry", "MHAGeometry"]

LAYER_FIRST = "layer_first"
PAGE_FIRST = "page_first"
PAGE_FIRST_DIRECT = "page_first_direct"
PAGE_HEAD = "page_head"


class _MHABase(PoolGeometry):
    """Shared fields and checks of the MHA family (docs/pools.md notation: L, H, D, b, P, N, S)."""

    def __init__(
        self,
        layout: str,
        layer_num: int,
        head_num: int,
        head_dim: int,
        dtype: DType | str | object,
        page_size: int,
        page_num: int,
        allowed: Sequence[str],
        why: str,
    ) -> None:
        self.layout = check_layout(self.pool_type, layout, allowed, why)
        self.layer_num = check_positive_int("layer_num", layer_num)
        self.head_num = check_positive_int("head_num", head_num)
        self.head_dim = check_positive_int("head_dim", head_dim)
        self.dtype = check_dtype("dtype", dtype)
        self._b = int(self.dtype.itemsize)
        self.page_size = check_positive_int("page_size", page_size)
        self.page_num = check_positive_int("page_num", page_num)
        self.size = self.page_num * self.page_size  # S = N * P (docs/pools.md §0)

    @property
    def page_count(self) -> int:
        return self.page_num

    def _common_params(self) -> dict[str, Any]:
        return {
            "layout": self.layout,
            "layer_num": self.layer_num,
            "head_num": self.head_num,
            "head_dim": self.head_dim,
            "dtype": self.dtype.name,
            "page_size": self.page_size,
            "page_num": self.page_num,
        }

    def _layer_slab(self, head_dim: int) -> int:
        """Bytes of one layer of one K/V tensor in layer_first: S*H*D*b (docs/pools.md §2.1)."""
        return self.size * self.head_num * head_dim * self._b

    def _layout_dim(self, head_dim: int) -> int:
        """Bytes of one token across all layers: H*D*b*L (layout_dim, docs/pools.md §2.1-§2.3)."""
        return self.head_num * head_dim * self._b * self.layer_num

    def _shape(self, head_dim: int) -> tuple[int, ...]:
        """Dims of one K (or V) tensor for the layout (docs/pools.md §2.1-§2.3 tables)."""
        L, H, P, N, S = self.layer_num, self.head_num, self.page_size, self.page_num, self.size
        return {
            LAYER_FIRST: (L, S, H, head_dim),
            PAGE_FIRST: (S, L, H, head_dim),
            PAGE_FIRST_DIRECT: (N, L, P, H, head_dim),
            PAGE_HEAD: (N, H, P, L, head_dim),
        }[self.layout]


class MHAGeometry(_MHABase):
    """MHATokenToKVPoolHost: one allocation (2, ...) with the V half at L*S*H*D*b (docs/pools.md
    §2.1).

    G = P*layout_dim for page_first and page_first_direct; None (one call) for layer_first and
    page_head, which #36798 does not cover. page_unified (SGLang 0.5.23) is one page block per
    page holding K and V of ``head_group_num`` head groups, G = the block (docs/pools.md §2.11).
    """

    pool_type = "mha"

    def __init__(
        self,
        layout: str,
        layer_num: int,
        head_num: int,
        head_dim: int,
        dtype: DType | str | object,
        page_size: int,
        page_num: int,
        head_group_num: int = 1,
    ) -> None:
        super().__init__(
            layout,
            layer_num,
            head_num,
            head_dim,
            dtype,
            page_size,
            page_num,
            (LAYER_FIRST, PAGE_FIRST, PAGE_FIRST_DIRECT, PAGE_HEAD, PAGE_UNIFIED),
            "docs/pools.md §2.1, §2.11",
        )
        self.head_group_num = check_positive_int("head_group_num", head_group_num)
        if self.head_group_num != 1 and self.layout != PAGE_UNIFIED:
            raise GeometryError(f"head_group_num applies to layout page_unified only, got "
                                f"{self.head_group_num} with {self.layout} (docs/pools.md §2.11)")
        self.block = (PageBlock(self.page_size, self.layer_num, self.head_num,
                                self.head_group_num, self.head_dim, self._b)
                      if self.layout == PAGE_UNIFIED else None)
        self.token_stride_size = self.head_num * self.head_dim * self._b
        self.layout_dim = self._layout_dim(self.head_dim)
        self.page_bytes = self.page_size * self.layout_dim  # one page of one half
        self.v_offset = self.layer_num * self._layer_slab(self.head_dim)  # L*S*H*D*b
        self._buffers = (self._kv_buffer(),)

    def _kv_buffer(self) -> BufferSpec:
        slab = self._layer_slab(self.head_dim)
        regions: tuple[Region, ...]
        if self.block is not None:
            # page_unified: the page_unified transfer kernels address whole page blocks, and an
            # L3 chunk is one run inside a block (docs/pools.md §2.11): the unit is the block.
            unit = self.block.bytes_per_page
            return BufferSpec("kv_buffer", self.block.dims(self.page_num), self.dtype, unit,
                              unit, regions_in_order(("pages", self.page_num * unit)))
        if self.layout == LAYER_FIRST:
            # Direct io (transfer_kv_direct, docs/pools.md §5.2) copies runs of consecutive tokens
            # per layer; a run may cross pages but never a layer slab, so the copy unit is the slab.
            granularity, copy_unit = None, slab
            parts = [(f"{half} layer {i}", slab) for half in "KV" for i in range(self.layer_num)]
            regions = regions_in_order(*parts)
        else:
            # page_first(_direct): whole-page descriptors (staged write-back, L3 meta, §5.1, §4);
            # page_head: L3 meta moves whole pages and the kernel copies inside a page (§4, §5.1).
            granularity = None if self.layout == PAGE_HEAD else self.page_bytes
            copy_unit = self.page_bytes
            regions = regions_in_order(("K half", self.v_offset), ("V half", self.v_offset))
        shape = (2, *self._shape(self.head_dim))
        return BufferSpec("kv_buffer", shape, self.dtype, granularity, copy_unit, regions)

    def buffers(self) -> tuple[BufferSpec, ...]:
        return self._buffers

    def params(self) -> dict[str, Any]:
        params = self._common_params()
        if self.block is not None:
            params["head_group_num"] = self.head_group_num
        return params

    @property
    def has_page_meta(self) -> bool:
        # 0.5.23's get_page_buffer_meta raises "Unsupported layout" for page_unified (§2.11)
        return self.block is None

    def derived(self) -> dict[str, Any]:
        if self.block is not None:
            return {"size": self.size, "size_per_token": 2 * self.layout_dim,
                    "page_block_bytes": self.block.bytes_per_page,
                    "group_bytes": self.block.group_bytes}
        return {
            "size": self.size,
            "size_per_token": 2 * self.layout_dim,  # H*D*L*b*2 (docs/pools.md §2.1)
            "token_stride_size": self.token_stride_size,
            "layout_dim": self.layout_dim,
            "page_bytes": self.page_bytes,
            "v_offset": self.v_offset,
        }

    def _page_slots(self) -> tuple[Slot, ...]:
        if self.layout == LAYER_FIRST:
            # docs/pools.md §4: per layer l, K at idx*H*D*b + l*S*H*D*b, then V = K + L*S*H*D*b.
            per_page = self.page_size * self.token_stride_size
            slab = self._layer_slab(self.head_dim)
            return tuple(
                Slot(0, half * self.v_offset + layer * slab, per_page, per_page)
                for layer in range(self.layer_num)
                for half in (0, 1)
            )
        # docs/pools.md §4: K = base + idx*L*H*D*b (idx = page*P), V = K + L*S*H*D*b.
        return (
            Slot(0, 0, self.page_bytes, self.page_bytes),
            Slot(0, self.v_offset, self.page_bytes, self.page_bytes),
        )

    def split_heads_page_extents(
        self, factor: int, pages: npt.ArrayLike | None = None
    ) -> PageExtents:
        """get_split_heads_page_buffer_meta for page_head (docs/pools.md §4): per head group h (step
        H/f) K at idx*L*H*D*b + h*P*L*D*b and V = K + L*S*H*D*b, each L*P*H*D*b/f bytes."""
        if self.layout != PAGE_HEAD:
            raise GeometryError(f"layout must be page_head for split heads, got {self.layout}")
        f = check_positive_int("factor", factor)
        if self.head_num % f:
            raise GeometryError(
                f"factor must divide head_num, got factor={f} head_num={self.head_num}"
            )
        step = self.head_num // f
        head_bytes = self.page_size * self.layer_num * self.head_dim * self._b
        size = self.page_bytes // f
        slots = tuple(
            Slot(0, half * self.v_offset + h * head_bytes, self.page_bytes, size)
            for h in range(0, self.head_num, step)
            for half in (0, 1)
        )
        return extents_from_slots(self.check_pages(pages), slots)


class KOnlyMHAGeometry(_MHABase):
    """MHATokenToKOnlyPoolHost (MiniMax sparse index-K, no V): one k_buffer (docs/pools.md §2.2).

    S, N and P come from the anchor MHA host. layer_first has no page meta (§4: it raises).
    """

    pool_type = "mha_k_only"

    def __init__(
        self,
        layout: str,
        layer_num: int,
        head_num: int,
        head_dim: int,
        dtype: DType | str | object,
        page_size: int,
        page_num: int,
    ) -> None:
        super().__init__(
            layout,
            layer_num,
            head_num,
            head_dim,
            dtype,
            page_size,
            page_num,
            (LAYER_FIRST, PAGE_FIRST, PAGE_FIRST_DIRECT),
            "docs/pools.md §2.2",
        )
        self.layout_dim = self._layout_dim(self.head_dim)
        self.page_bytes = self.page_size * self.layout_dim
        slab = self._layer_slab(self.head_dim)
        if self.layout == LAYER_FIRST:
            # Same copy paths as MHA layer_first: runs stay inside one layer slab (§5.2).
            buf = BufferSpec(
                "k_buffer",
                self._shape(self.head_dim),
                self.dtype,
                None,
                slab,
                regions_in_order(*[(f"layer {i}", slab) for i in range(self.layer_num)]),
            )
        else:
            buf = BufferSpec(
                "k_buffer",
                self._shape(self.head_dim),
                self.dtype,
                self.page_bytes,
                self.page_bytes,
                regions_in_order(("K", self.layer_num * slab)),
            )
        self._buffers = (buf,)

    def buffers(self) -> tuple[BufferSpec, ...]:
        return self._buffers

    def params(self) -> dict[str, Any]:
        return self._common_params()

    @property
    def has_page_meta(self) -> bool:
        return self.layout != LAYER_FIRST

    def derived(self) -> dict[str, Any]:
        return {
            "size": self.size,
            "size_per_token": self.layout_dim,  # H*D*L*b (docs/pools.md §2.2)
            "layout_dim": self.layout_dim,
            "page_bytes": self.page_bytes,
        }

    def _page_slots(self) -> tuple[Slot, ...]:
        # docs/pools.md §4: base + idx*L*H*D*b, size L*P*H*D*b.
        return (Slot(0, 0, self.page_bytes, self.page_bytes),)


class AsymmetricMHAGeometry(_MHABase):
    """AsymmetricMHATokenToKVPoolHost (head_dim != v_head_dim): two allocations, own G each.

    Only page_first and page_first_direct exist; upstream raises ValueError for layer_first and
    page_head (docs/pools.md §2.3).
    """

    pool_type = "mha_asymmetric"

    def __init__(
        self,
        layout: str,
        layer_num: int,
        head_num: int,
        head_dim: int,
        v_head_dim: int,
        dtype: DType | str | object,
        page_size: int,
        page_num: int,
    ) -> None:
        super().__init__(
            layout,
            layer_num,
            head_num,
            head_dim,
            dtype,
            page_size,
            page_num,
            (PAGE_FIRST, PAGE_FIRST_DIRECT),
            "docs/pools.md §2.3: upstream raises ValueError for layer_first and page_head",
        )
        self.v_head_dim = check_positive_int("v_head_dim", v_head_dim)
        self.k_layout = self._layout_dim(self.head_dim)  # H*D*b*L
        self.v_layout = self._layout_dim(self.v_head_dim)  # H*Dv*b*L
        self._buffers = tuple(
            BufferSpec(
                name,
                self._shape(dim),
                self.dtype,
                self.page_size * lay,
                self.page_size * lay,
                regions_in_order((half, self.size * lay)),
            )
            for name, half, dim, lay in (
                ("k_buffer", "K", self.head_dim, self.k_layout),
                ("v_buffer", "V", self.v_head_dim, self.v_layout),
            )
        )

    def buffers(self) -> tuple[BufferSpec, ...]:
        return self._buffers

    def params(self) -> dict[str, Any]:
        params = self._common_params()
        params["v_head_dim"] = self.v_head_dim
        return params

    def derived(self) -> dict[str, Any]:
        return {
            "size": self.size,
            "size_per_token": self.k_layout + self.v_layout,  # (D+Dv)*H*L*b (docs/pools.md §2.3)
            "k_layout": self.k_layout,
            "v_layout": self.v_layout,
        }

    def _page_slots(self) -> tuple[Slot, ...]:
        # docs/pools.md §4: K = kbase + idx*L*H*D*b, V = vbase + idx*L*H*Dv*b; for page_first_direct
        # (idx//P)*L*P*H*D*b is the same offset for page-aligned idx.
        k_page = self.page_size * self.k_layout
        v_page = self.page_size * self.v_layout
        return (Slot(0, 0, k_page, k_page), Slot(1, 0, v_page, v_page))
