"""DeepSeek V4 host pools: the paged KV/indexer sub-pool and the compress-state pool.

Both are uint8 row stores of L "layers" (device buffers / state pools) per page. layer_first is
a list of L separate allocations, each registered in one call; page_first(_direct) is one
allocation with G = L * row bytes. Facts: docs/pools.md §2.7, §4.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Self

from kvreg.fakes.dtypes import DType

from ._checks import (
    GeometryError,
    check_dtype,
    check_layout,
    check_positive_int,
    check_shape,
)
from .base import BufferSpec, PoolGeometry, Slot, regions_in_order

__all__ = ["DeepSeekV4PagedGeometry", "DeepSeekV4StateGeometry"]

LAYER_FIRST = "layer_first"
PAGE_FIRST = "page_first"
PAGE_FIRST_DIRECT = "page_first_direct"
LAYOUTS = (LAYER_FIRST, PAGE_FIRST, PAGE_FIRST_DIRECT)


class _V4RowPool(PoolGeometry):
    """Shared geometry: page_num host pages of layer_num rows of row_bytes each (docs/pools.md
    §2.7)."""

    row_bytes: int
    layer_num: int
    page_num: int

    def _setup(self, layout: str, page_size: int, page_num: int) -> None:
        self.layout = check_layout(self.pool_type, layout, LAYOUTS, "docs/pools.md §2.7")
        self.page_size = check_positive_int("page_size", page_size)
        self.page_num = check_positive_int("page_num", page_num)
        self.dtype = check_dtype("dtype", "uint8")
        self.size = self.page_num * self.page_size  # S = num_host_pages * page_size
        N, L, row = self.page_num, self.layer_num, self.row_bytes
        if self.layout == LAYER_FIRST:
            # One allocation per layer, each registered whole (G None). Transfers address rows of
            # that allocation only, so no extent can leave it: the copy unit is the allocation.
            self._buffers = tuple(
                BufferSpec(
                    f"layer_{i}",
                    (N, row),
                    self.dtype,
                    None,
                    N * row,
                    regions_in_order(("rows", N * row)),
                )
                for i in range(L)
            )
        else:
            shape = (N, L, row) if self.layout == PAGE_FIRST else (N, L, 1, row)
            page = L * row
            self._buffers = (
                BufferSpec(
                    "kv_buffer",
                    shape,
                    self.dtype,
                    page,
                    page,
                    regions_in_order(("pages", N * page)),
                ),
            )

    @classmethod
    def from_size(cls, size: int, page_size: int, dcp_size: int = 1, **params: Any) -> Self:
        """Not available: V4 pools size num_host_pages from a host memory budget, not from the
        HostKVCache rule of docs/pools.md §0; pass page_num."""
        raise GeometryError(f"size: pool type {cls.pool_type} takes page_num, not a base size")

    @property
    def page_count(self) -> int:
        return self.page_num

    def buffers(self) -> tuple[BufferSpec, ...]:
        return self._buffers

    def _page_slots(self) -> tuple[Slot, ...]:
        row = self.row_bytes
        if self.layout == LAYER_FIRST:
            # docs/pools.md §4: per layer, kv_buffer[l].data_ptr() + row*row_bytes.
            return tuple(Slot(i, 0, row, row) for i in range(self.layer_num))
        # docs/pools.md §4: kv_buffer[row].data_ptr() with row = idx//P, size L*row_bytes.
        page = self.layer_num * row
        return (Slot(0, 0, page, page),)


class DeepSeekV4PagedGeometry(_V4RowPool):
    """DeepSeekV4PagedHostPool: L = len(device_buffers), item_bytes = one page of one layer;
    page_size is slot_page_size and page_num is num_host_pages (docs/pools.md §2.7)."""

    pool_type = "deepseek_v4_paged"

    def __init__(
        self, layout: str, layer_num: int, item_bytes: int, page_size: int, page_num: int
    ) -> None:
        self.layer_num = check_positive_int("layer_num", layer_num)
        self.item_bytes = check_positive_int("item_bytes", item_bytes)
        self.row_bytes = self.item_bytes
        self._setup(layout, page_size, page_num)

    def params(self) -> dict[str, Any]:
        return {
            "layout": self.layout,
            "layer_num": self.layer_num,
            "item_bytes": self.item_bytes,
            "page_size": self.page_size,
            "page_num": self.page_num,
        }

    def derived(self) -> dict[str, Any]:
        # size_per_token = item_bytes, used as a per-page quantity (docs/pools.md §2.7).
        return {"size": self.size, "size_per_token": self.item_bytes}


class DeepSeekV4StateGeometry(_V4RowPool):
    """DeepSeekV4StateHostPool: one "layer" per CompressStatePool; each pool's kv_score tensor has
    shape kv_score_shapes[i], and state_page_bytes = ring_size * kv_score[0].nbytes must be equal
    across pools. page_size is swa_page_size (docs/pools.md §2.7)."""

    pool_type = "deepseek_v4_state"

    def __init__(
        self,
        layout: str,
        kv_score_shapes: Sequence[Sequence[int]],
        ring_size: int,
        page_size: int,
        page_num: int,
        kv_score_dtype: DType | str | object = "uint8",
    ) -> None:
        if (
            isinstance(kv_score_shapes, (str, bytes))
            or not isinstance(kv_score_shapes, Sequence)
            or not kv_score_shapes
        ):
            raise GeometryError(
                f"kv_score_shapes must be a non-empty list of shapes, got {kv_score_shapes!r}"
            )
        self.kv_score_shapes = tuple(
            check_shape(f"kv_score_shapes[{i}]", s, allow_zero=False)
            for i, s in enumerate(kv_score_shapes)
        )
        self.ring_size = check_positive_int("ring_size", ring_size)
        self.kv_score_dtype = check_dtype("kv_score_dtype", kv_score_dtype)
        # kv_score[0] drops the leading dim: nbytes = prod(shape[1:]) * itemsize.
        per_pool = [
            self.ring_size * math.prod(s[1:]) * int(self.kv_score_dtype.itemsize)
            for s in self.kv_score_shapes
        ]
        if len(set(per_pool)) != 1:
            raise GeometryError(
                "kv_score_shapes: state_page_bytes must be equal across state pools, "
                f"got {per_pool}"
            )
        self.state_page_bytes = per_pool[0]
        self.layer_num = len(self.kv_score_shapes)
        self.row_bytes = self.state_page_bytes
        self._setup(layout, page_size, page_num)

    def params(self) -> dict[str, Any]:
        return {
            "layout": self.layout,
            "kv_score_shapes": [list(s) for s in self.kv_score_shapes],
            "ring_size": self.ring_size,
            "page_size": self.page_size,
            "page_num": self.page_num,
            "kv_score_dtype": self.kv_score_dtype.name,
        }

    def derived(self) -> dict[str, Any]:
        return {"size": self.size, "state_page_bytes": self.state_page_bytes}
