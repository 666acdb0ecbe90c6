"""FastDeploy Mooncake storage buffers (cache_transfer_manager._init_storage_buffer).

Facts: docs/mooncake-verbs.md §2.3 (layout, stride, read path), §2.1 (chunked register_buffer), §6
item 5 (chunk seams must align to the block stride).
"""

from __future__ import annotations

from typing import Any, Self

import numpy.typing as npt

from kvreg.fakes.dtypes import DType

from ._checks import GeometryError, check_dtype, check_nonneg_int, check_positive_int
from .base import (
    BufferSpec,
    PageExtents,
    PoolGeometry,
    Slot,
    extents_from_slots,
    regions_in_order,
)

__all__ = ["FastDeployGeometry"]

BLOCK_WISE_FP8 = "block_wise_fp8"
# cache_item_bytes: float32 4, bf16/fp16 2, uint8/block_wise_fp8 1 (docs/mooncake-verbs.md §2.3).
_CACHE_DTYPES = ("float32", "bfloat16", "float16", "uint8", BLOCK_WISE_FP8)
SIDES = ("read", "write")


class FastDeployGeometry(PoolGeometry):
    """A read and a write buffer [2][block_num, layer_num, head_num, block_size, head_dim]: the K
    half, then the V half at +total/2; each whole buffer goes to storage_backend.register_buffer.

    A page is a block: page_size = block_size tokens, page_num = block_num. Every transfer is one
    block of one half, cache_buffer_stride_bytes = L*H*block_size*D*item_bytes long, so copy_unit
    and granularity are that stride: FastDeploy passes no granularity itself (its chunks are cut
    at fixed MC_MAX_MR_SIZE offsets, §2.1), and the stride is what an RDMA chunk planner must
    align to (§6 item 5). block_wise_fp8 adds read/write scale buffers of
    scale_buffer_stride_bytes = L*H*block_size*scale_item_bytes per block, same two halves.
    """

    pool_type = "fastdeploy"
    _slot_major = True  # keys = k_keys + v_keys (+ scale keys): all K blocks, then all V blocks

    def __init__(
        self,
        num_layers: int,
        head_num: int,
        head_dim: int,
        dtype: DType | str | object,
        page_size: int,
        page_num: int,
        num_extra_layers: int = 0,
        scale_item_bytes: int | None = None,
    ) -> None:
        self.layout = "block_first"
        self.num_layers = check_positive_int("num_layers", num_layers)
        self.num_extra_layers = check_nonneg_int("num_extra_layers", num_extra_layers)
        self.layer_num = self.num_layers + self.num_extra_layers
        self.head_num = check_positive_int("head_num", head_num)
        self.head_dim = check_positive_int("head_dim", head_dim)
        self.block_wise_fp8 = isinstance(dtype, str) and dtype == BLOCK_WISE_FP8
        self.dtype = check_dtype("dtype", "uint8" if self.block_wise_fp8 else dtype)
        if not self.block_wise_fp8 and self.dtype.name not in _CACHE_DTYPES:
            raise GeometryError(
                f"dtype must be one of {', '.join(_CACHE_DTYPES)} for pool type fastdeploy, "
                f"got {self.dtype.name}"
            )
        self.page_size = check_positive_int("page_size", page_size)
        self.page_num = check_positive_int("page_num", page_num)
        if self.block_wise_fp8:
            if scale_item_bytes is None:
                raise GeometryError("scale_item_bytes must be given for dtype block_wise_fp8")
            self.scale_item_bytes: int | None = check_positive_int(
                "scale_item_bytes", scale_item_bytes
            )
        elif scale_item_bytes is not None:
            raise GeometryError("scale_item_bytes is only valid with dtype block_wise_fp8")
        else:
            self.scale_item_bytes = None
        L, H, P, D, N = self.layer_num, self.head_num, self.page_size, self.head_dim, self.page_num
        self.cache_buffer_stride_bytes = L * H * P * D * int(self.dtype.itemsize)
        buffers = [
            self._buffer(side, (2, N, L, H, P, D), self.dtype, self.cache_buffer_stride_bytes)
            for side in SIDES
        ]
        self.scale_buffer_stride_bytes: int | None = None
        if self.scale_item_bytes is not None:
            self.scale_buffer_stride_bytes = L * H * P * self.scale_item_bytes
            scale_shape = (2, N, L, H, P, self.scale_item_bytes)  # raw bytes per scale
            buffers += [
                self._buffer(
                    f"{side}_scale", scale_shape, self.dtype, self.scale_buffer_stride_bytes
                )
                for side in SIDES
            ]
        self._buffers = tuple(buffers)

    def _buffer(self, name: str, shape: tuple[int, ...], dtype: DType, stride: int) -> BufferSpec:
        half = self.page_num * stride
        return BufferSpec(
            name, shape, dtype, stride, stride, regions_in_order(("K half", half), ("V half", half))
        )

    @classmethod
    def from_max_model_len(cls, max_model_len: int, page_size: int, **params: Any) -> Self:
        """block_num = ceil(max_model_len / block_size) (docs/mooncake-verbs.md §2.3)."""
        length = check_positive_int("max_model_len", max_model_len)
        block = check_positive_int("page_size", page_size)
        return cls(page_size=block, page_num=-(-length // block), **params)

    @classmethod
    def from_size(cls, size: int, page_size: int, dcp_size: int = 1, **params: Any) -> Self:
        """Not available: FastDeploy sizes by max_model_len (use from_max_model_len)."""
        raise GeometryError("size: pool type fastdeploy is sized by max_model_len, not size")

    @property
    def page_count(self) -> int:
        return self.page_num

    def buffers(self) -> tuple[BufferSpec, ...]:
        return self._buffers

    def params(self) -> dict[str, Any]:
        return {
            "num_layers": self.num_layers,
            "head_num": self.head_num,
            "head_dim": self.head_dim,
            "dtype": BLOCK_WISE_FP8 if self.block_wise_fp8 else self.dtype.name,
            "page_size": self.page_size,
            "page_num": self.page_num,
            "num_extra_layers": self.num_extra_layers,
            "scale_item_bytes": self.scale_item_bytes,
        }

    def derived(self) -> dict[str, Any]:
        return {
            "layer_num": self.layer_num,
            "cache_buffer_stride_bytes": self.cache_buffer_stride_bytes,
            "scale_buffer_stride_bytes": self.scale_buffer_stride_bytes,
        }

    def _side_slots(self, side: str) -> list[Slot]:
        # Read path (§2.3): K at buffer + block*stride, V at buffer + total/2 + block*stride, then
        # the scale keys the same way; the write path mirrors it on the write buffers [inferred].
        slots = []
        for index, buf in enumerate(self._buffers):
            if buf.name in (side, f"{side}_scale"):
                stride = buf.copy_unit
                half = self.page_num * stride
                slots += [Slot(index, 0, stride, stride), Slot(index, half, stride, stride)]
        return slots

    def _page_slots(self) -> tuple[Slot, ...]:
        return tuple(self._side_slots("read") + self._side_slots("write"))

    def page_extents(
        self, pages: npt.ArrayLike | None = None, side: str | None = None
    ) -> PageExtents:
        """Read-side rows then write-side rows; side="read" or "write" selects one side."""
        if side is None:
            return super().page_extents(pages)
        if side not in SIDES:
            raise GeometryError(f"side must be read, write or None, got {side!r}")
        slots = tuple(self._side_slots(side))
        return extents_from_slots(self.check_pages(pages), slots, slot_major=True)
