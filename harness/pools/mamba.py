"""Mamba host pool: one temporal (SSM) buffer and one buffer per conv state, page size 1.

Facts: docs/pools.md §2.6 (MambaPoolHost), §4 (page meta per slot).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Self

from kvreg.fakes.dtypes import DType

from ._checks import GeometryError, check_dtype, check_layout, check_positive_int, check_shape
from .base import BufferSpec, PoolGeometry, Slot, host_sizing, regions_in_order

__all__ = ["MambaGeometry"]

PAGE_FIRST = "page_first"
PAGE_FIRST_DIRECT = "page_first_direct"


class MambaGeometry(PoolGeometry):
    """MambaPoolHost: slots are pages (P = 1, S = N = size0 + 1); each buffer (S, Lm, 1, *shape)
    is its own allocation with G = Lm * prod(shape) * itemsize (docs/pools.md §2.6).

    A zero-element temporal buffer (conv-only model) is allocated with plain torch.empty and never
    registered (cuda_registered False, granularity None) and has no page pointer (§4).
    layer_first is rejected: the version described asserts page_first or page_first_direct.
    """

    pool_type = "mamba"

    def __init__(
        self,
        layout: str,
        num_mamba_layers: int,
        temporal_shape: Sequence[int],
        temporal_dtype: DType | str | object,
        conv_shapes: Sequence[Sequence[int]],
        conv_dtype: DType | str | object,
        page_num: int,
    ) -> None:
        self.layout = check_layout(
            self.pool_type,
            layout,
            (PAGE_FIRST, PAGE_FIRST_DIRECT),
            "docs/pools.md §2.6: the described version asserts page_first or page_first_direct",
        )
        self.page_size = 1
        self.num_mamba_layers = check_positive_int("num_mamba_layers", num_mamba_layers)
        self.temporal_shape = check_shape("temporal_shape", temporal_shape, allow_zero=True)
        self.temporal_dtype = check_dtype("temporal_dtype", temporal_dtype)
        if isinstance(conv_shapes, (str, bytes)) or not isinstance(conv_shapes, Sequence):
            raise GeometryError(f"conv_shapes must be a sequence of shapes, got {conv_shapes!r}")
        self.conv_shapes = tuple(
            check_shape(f"conv_shapes[{i}]", shape, allow_zero=False)
            for i, shape in enumerate(conv_shapes)
        )
        self.conv_dtype = check_dtype("conv_dtype", conv_dtype)
        self.page_num = check_positive_int("page_num", page_num)
        self.size = self.page_num
        self._buffers = tuple(self._buffer(*part) for part in self._parts())
        if all(buf.nbytes == 0 for buf in self._buffers):
            raise GeometryError("temporal_shape and conv_shapes: the pool would hold no bytes")

    def _parts(self) -> list[tuple[str, tuple[int, ...], DType]]:
        parts = [("temporal", self.temporal_shape, self.temporal_dtype)]
        parts += [(f"conv_{i}", shape, self.conv_dtype) for i, shape in enumerate(self.conv_shapes)]
        return parts

    def _buffer(self, name: str, shape: tuple[int, ...], dtype: DType) -> BufferSpec:
        slot_bytes = self.num_mamba_layers * math.prod(shape) * int(dtype.itemsize)
        dims = (self.page_num, self.num_mamba_layers, 1, *shape)
        if slot_bytes == 0:
            # Never registered, never transferred: copy_unit 1 is vacuous but keeps it positive.
            return BufferSpec(name, dims, dtype, None, 1, (), cuda_registered=False)
        return BufferSpec(
            name,
            dims,
            dtype,
            slot_bytes,
            slot_bytes,
            regions_in_order(("slots", self.page_num * slot_bytes)),
        )

    @classmethod
    def from_size(cls, size: int, page_size: int = 1, dcp_size: int = 1, **params: Any) -> Self:
        """S = N = size0 + 1 (docs/pools.md §2.6, §0 with P = 1)."""
        p, n, _ = host_sizing(size, page_size, dcp_size)
        if p != 1:
            raise GeometryError(f"page_size must be 1 for pool type mamba, got {page_size}")
        return cls(page_num=n, **params)

    @property
    def page_count(self) -> int:
        return self.page_num

    def buffers(self) -> tuple[BufferSpec, ...]:
        return self._buffers

    def params(self) -> dict[str, Any]:
        return {
            "layout": self.layout,
            "num_mamba_layers": self.num_mamba_layers,
            "temporal_shape": list(self.temporal_shape),
            "temporal_dtype": self.temporal_dtype.name,
            "conv_shapes": [list(shape) for shape in self.conv_shapes],
            "conv_dtype": self.conv_dtype.name,
            "page_num": self.page_num,
        }

    def derived(self) -> dict[str, Any]:
        # docs/pools.md §2.6: Lm * (sum prod(C_i)*conv_b + prod(T)*temporal_b)
        spt = sum(buf.nbytes for buf in self._buffers) // self.page_num
        return {"size": self.size, "size_per_token": spt}

    def _page_slots(self) -> tuple[Slot, ...]:
        # docs/pools.md §4: per slot i, temporal (skipped when empty) then each conv_j, each at
        # base + i * Lm * prod(shape) * b with that size.
        return tuple(
            Slot(index, 0, buf.copy_unit, buf.copy_unit)
            for index, buf in enumerate(self._buffers)
            if buf.nbytes
        )
