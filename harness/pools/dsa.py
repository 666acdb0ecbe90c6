"""DSA (NSA) indexer host pool: the uint8 index_k_with_scale buffer, one page per indexer row.

Facts: docs/pools.md §2.5 (DSAIndexerPoolHost), §4 (page meta), §5.1 (kernel path), §2.10 (worked
G).
"""

from __future__ import annotations

from typing import Any

from ._checks import check_dtype, check_layout, check_positive_int
from .base import BufferSpec, PoolGeometry, Slot, regions_in_order

__all__ = ["DSAIndexerGeometry"]

LAYER_FIRST = "layer_first"
PAGE_FIRST = "page_first"
PAGE_FIRST_DIRECT = "page_first_direct"


class DSAIndexerGeometry(PoolGeometry):
    """DSAIndexerPoolHost. S, N and P come from the anchor MLA host; L counts the live target
    layers plus packed MTP draft layers.

    Per token per layer t = index_head_dim + (index_head_dim // quant_block_size) * 4 bytes; the
    buffer holds indexer_page_num = (S + P + 1) // P rows (N+1 for P >= 2, N+2 for P = 1), one or
    two more than the anchor's N pages that transfers address (docs/pools.md §2.5).
    """

    pool_type = "dsa_indexer"

    def __init__(
        self,
        layout: str,
        layer_num: int,
        index_head_dim: int,
        quant_block_size: int,
        page_size: int,
        page_num: int,
    ) -> None:
        self.layout = check_layout(
            self.pool_type, layout, (LAYER_FIRST, PAGE_FIRST, PAGE_FIRST_DIRECT),
            "docs/pools.md §2.5")
        self.layer_num = check_positive_int("layer_num", layer_num)
        self.index_head_dim = check_positive_int("index_head_dim", index_head_dim)
        self.quant_block_size = check_positive_int("quant_block_size", quant_block_size)
        self.page_size = check_positive_int("page_size", page_size)
        self.page_num = check_positive_int("page_num", page_num)
        self.dtype = check_dtype("dtype", "uint8")  # index_k_with_scale_buffer_dtype
        self.size = self.page_num * self.page_size
        P, L = self.page_size, self.layer_num
        self.token_bytes = self.index_head_dim + (self.index_head_dim // self.quant_block_size) * 4
        self.indexer_page_stride_size = self.token_bytes * P  # t*P: one page of one layer
        self.indexer_layout_dim = self.indexer_page_stride_size * L  # t*P*L: one page
        self.indexer_page_num = (self.size + P + 1) // P
        rows, stride = self.indexer_page_num, self.indexer_page_stride_size
        if self.layout == LAYER_FIRST:
            # Transfers are page rows of t*P bytes inside one layer slab; the direct path groups
            # consecutive rows, so the copy unit is the layer slab rows*t*P (docs/pools.md §2.5,
            # §5.2).
            # The spare rows of each slab are allocated but never addressed: host indices stay
            # below S, so page rows stop at N (docs/pools.md §2.5).
            slab = rows * stride
            used, spare = self.page_num * stride, (rows - self.page_num) * stride
            buf = BufferSpec(
                "index_k_with_scale_buffer",
                (L, rows, stride),
                self.dtype,
                None,
                slab,
                regions_in_order(*[part for i in range(L) for part in (
                    (f"layer {i}", used), (f"layer {i} spare rows", spare, False))]),
            )
        else:
            page = self.indexer_layout_dim
            buf = BufferSpec(
                "index_k_with_scale_buffer",
                (rows, L, 1, stride),
                self.dtype,
                page,
                page,
                regions_in_order(
                    ("pages", self.page_num * page),
                    # never addressed: host indices stay below S (docs/pools.md §2.5)
                    ("spare pages", (rows - self.page_num) * page, False),
                ),
            )
        self._buffers = (buf,)

    @property
    def page_count(self) -> int:
        return self.page_num

    @property
    def has_page_meta(self) -> bool:
        return self.layout != LAYER_FIRST  # docs/pools.md §4: layer_first raises

    def buffers(self) -> tuple[BufferSpec, ...]:
        return self._buffers

    def params(self) -> dict[str, Any]:
        return {
            "layout": self.layout,
            "layer_num": self.layer_num,
            "index_head_dim": self.index_head_dim,
            "quant_block_size": self.quant_block_size,
            "page_size": self.page_size,
            "page_num": self.page_num,
        }

    def derived(self) -> dict[str, Any]:
        return {
            "size": self.size,
            "size_per_token": self.token_bytes * self.layer_num,  # t*L (docs/pools.md §2.5)
            "token_bytes": self.token_bytes,
            "indexer_page_stride_size": self.indexer_page_stride_size,
            "indexer_layout_dim": self.indexer_layout_dim,
            "indexer_page_num": self.indexer_page_num,
            "kernel_io_supported": self.indexer_page_stride_size % 8 == 0,  # docs/pools.md §2.5
        }

    def _page_slots(self) -> tuple[Slot, ...]:
        # docs/pools.md §4: base + (idx//P) * (L*t*P), size L*t*P.
        page = self.indexer_layout_dim
        return (Slot(0, 0, page, page),)
