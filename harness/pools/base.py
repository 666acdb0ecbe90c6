"""Common pieces of every pool geometry: buffers, regions, per-page extents and host sizing.

A geometry is pure arithmetic: it allocates nothing. Scenario runners turn its BufferSpecs into
real or virtual tensors, register them with the granularity upstream would pass, and check every
PageExtents row against the registrations.
"""

from __future__ import annotations

import json
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple, Self

import numpy as np
import numpy.typing as npt

from kvreg.fakes.dtypes import DType

from ._checks import GeometryError, NoPageMetaError, check_nonneg_int, check_positive_int

Int64Array = npt.NDArray[np.int64]

__all__ = [
    "BufferSpec",
    "ExtentFamily",
    "GeometryError",
    "Int64Array",
    "NoPageMetaError",
    "PageExtents",
    "PoolGeometry",
    "Region",
    "Slot",
    "base_size_from_host_gb",
    "base_size_from_ratio",
    "extents_from_slots",
    "host_sizing",
    "regions_in_order",
]


@dataclass(frozen=True)
class Region:
    """A named byte range of a buffer (e.g. "K half"), from the buffer base; used for drawing.

    ``copied`` is False for bytes upstream allocates but no transfer ever touches (the DSA
    indexer's spare trailing rows, docs/pools.md §2.5): a seam there cuts no copy.
    """

    name: str
    offset: int
    nbytes: int
    copied: bool = True

    @property
    def end(self) -> int:
        return self.offset + self.nbytes


def regions_in_order(*parts: tuple[str, int] | tuple[str, int, bool]) -> tuple[Region, ...]:
    """Lay (name, nbytes) or (name, nbytes, copied) parts back to back from offset 0."""
    regions: list[Region] = []
    offset = 0
    for name, nbytes, *copied in parts:
        regions.append(Region(name, offset, nbytes, *copied))
        offset += nbytes
    return tuple(regions)


@dataclass(frozen=True)
class BufferSpec:
    """One host allocation of a pool, as upstream allocates and registers it.

    granularity: the registration_granularity_bytes upstream passes (None = one cudaHostRegister
    call for the whole buffer). copy_unit: the smallest block size such that every transfer extent
    of this buffer lies inside one block [k*copy_unit, (k+1)*copy_unit) from the base. regions tile
    the buffer exactly. cuda_registered is False where upstream never calls cudaHostRegister on
    this buffer (NPU-only layouts, zero-element buffers).
    """

    name: str
    shape: tuple[int, ...]
    dtype: DType
    granularity: int | None
    copy_unit: int
    regions: tuple[Region, ...]
    cuda_registered: bool = True

    def __post_init__(self) -> None:
        if any(dim < 0 for dim in self.shape):
            raise GeometryError(f"buffer {self.name}: shape must be non-negative, got {self.shape}")
        if self.granularity is not None and self.granularity <= 0:
            raise GeometryError(f"buffer {self.name}: granularity must be positive or None")
        if self.copy_unit <= 0:
            raise GeometryError(f"buffer {self.name}: copy_unit must be positive")
        offset = 0
        for region in self.regions:
            if region.offset != offset or region.nbytes <= 0:
                raise GeometryError(f"buffer {self.name}: regions must tile the buffer in order")
            offset = region.end
        if offset != self.nbytes:
            raise GeometryError(
                f"buffer {self.name}: regions cover {offset} bytes, buffer has {self.nbytes}"
            )

    @property
    def nbytes(self) -> int:
        """Exact byte count (numel * itemsize): what cudaHostRegister gets (docs/pools.md §0)."""
        return math.prod(self.shape) * int(self.dtype.itemsize)

    def as_dict(self) -> dict[str, Any]:
        """JSON-safe summary."""
        return {
            "name": self.name,
            "shape": list(self.shape),
            "dtype": self.dtype.name,
            "nbytes": self.nbytes,
            "granularity": self.granularity,
            "copy_unit": self.copy_unit,
            "cuda_registered": self.cuda_registered,
            "regions": [
                {"name": r.name, "offset": r.offset, "nbytes": r.nbytes} for r in self.regions
            ],
        }


def _frozen_int64(values: Any) -> Int64Array:
    array: Int64Array = np.ascontiguousarray(values, dtype=np.int64).reshape(-1)
    array.setflags(write=False)
    return array


@dataclass(frozen=True, eq=False)
class PageExtents:
    """One row per (pointer, size) pair get_page_buffer_meta returns, in upstream order.

    buffer indexes the pool's buffers(); offset is from that buffer's base; page is the logical
    page (slot for Mamba, block for FastDeploy) the row belongs to. Arrays are int64, read-only.
    """

    buffer: Int64Array
    offset: Int64Array
    size: Int64Array
    page: Int64Array

    def __post_init__(self) -> None:
        for name in ("buffer", "offset", "size", "page"):
            object.__setattr__(self, name, _frozen_int64(getattr(self, name)))
        if not len(self.buffer) == len(self.offset) == len(self.size) == len(self.page):
            raise GeometryError("PageExtents arrays must have equal lengths")

    def __len__(self) -> int:
        return len(self.offset)

    @property
    def end(self) -> Int64Array:
        """Exclusive end offset of each row."""
        return self.offset + self.size

    def shifted(self, buffer_offset: int) -> PageExtents:
        """The same rows with buffer indices moved by buffer_offset (for groups)."""
        return PageExtents(self.buffer + buffer_offset, self.offset, self.size, self.page)

    @staticmethod
    def concat(parts: Sequence[PageExtents]) -> PageExtents:
        """Rows of all parts, in order."""
        if not parts:
            empty = np.zeros(0, dtype=np.int64)
            return PageExtents(empty, empty, empty, empty)
        return PageExtents(
            np.concatenate([p.buffer for p in parts]),
            np.concatenate([p.offset for p in parts]),
            np.concatenate([p.size for p in parts]),
            np.concatenate([p.page for p in parts]),
        )


class Slot(NamedTuple):
    """One pointer of every page: offset = base + page * page_stride in buffer `buffer`."""

    buffer: int
    base: int
    page_stride: int
    size: int


@dataclass(frozen=True)
class ExtentFamily:
    """One pointer slot over all pages: the page-meta rows it produces, in closed form."""

    buffer: int
    base: int
    stride: int
    size: int
    count: int
    row_start: int
    row_step: int

    def offset(self, page: int) -> int:
        return self.base + page * self.stride

    def row(self, page: int) -> int:
        return self.row_start + page * self.row_step

    @property
    def span_end(self) -> int:
        """One past the last byte any of its rows touches."""
        if not self.count:
            return self.base
        return max(self.base + (self.count - 1) * self.stride + self.size, self.base + self.size)

    def shifted(self, buffers: int, rows: int) -> ExtentFamily:
        return ExtentFamily(self.buffer + buffers, self.base, self.stride, self.size,
                            self.count, self.row_start + rows, self.row_step)


def extents_from_slots(
    pages: Int64Array, slots: Sequence[Slot], *, slot_major: bool = False
) -> PageExtents:
    """Vectorised page meta: one row per (page, slot).

    Page-major order (all slots of page 0, then page 1, ...) is what SGLang's get_page_buffer_meta
    returns; slot_major gives FastDeploy's order (all K blocks, then all V blocks).
    """
    n_slots = len(slots)
    table = np.array([tuple(s) for s in slots], dtype=np.int64).reshape(n_slots, 4)
    grid = pages[:, None]
    offset = table[None, :, 1] + grid * table[None, :, 2]
    shape = offset.shape
    buffer = np.broadcast_to(table[None, :, 0], shape)
    size = np.broadcast_to(table[None, :, 3], shape)
    page = np.broadcast_to(grid, shape)
    if slot_major:
        return PageExtents(buffer.T, offset.T, size.T, page.T)
    return PageExtents(buffer, offset, size, page)


def host_sizing(size: int, page_size: int, dcp_size: int = 1) -> tuple[int, int, int]:
    """Return (P, N, S) for a base size S0 (docs/pools.md §0).

    P = page_size // dcp_size (must divide evenly), N = S0 // P + 1 (always one page more than
    floor, even when S0 is a multiple of P), S = N * P.
    """
    s0 = check_nonneg_int("size", size)
    widened = check_positive_int("page_size", page_size)
    dcp = check_positive_int("dcp_size", dcp_size)
    if widened % dcp:
        raise GeometryError(
            f"page_size must be divisible by dcp_size, got page_size={widened} dcp_size={dcp}"
        )
    p = widened // dcp
    n = s0 // p + 1
    return p, n, n * p


def base_size_from_host_gb(host_size_gb: float, size_per_token: int) -> int:
    """S0 from --hicache-size in GB (docs/pools.md §0): int(host_size * 1e9 // size_per_token)."""
    if not host_size_gb > 0:
        raise GeometryError(f"host_size_gb must be positive, got {host_size_gb!r}")
    spt = check_positive_int("size_per_token", size_per_token)
    return int(host_size_gb * 1e9 // spt)


def base_size_from_ratio(device_size: int, host_to_device_ratio: float) -> int:
    """S0 without --hicache-size: int(device_pool.size * host_to_device_ratio).

    See docs/pools.md §0.
    """
    device = check_nonneg_int("device_size", device_size)
    if not host_to_device_ratio > 0:
        raise GeometryError(f"host_to_device_ratio must be positive, got {host_to_device_ratio!r}")
    return int(device * host_to_device_ratio)


class PoolGeometry(ABC):
    """Abstract geometry of one host pool: its buffers and the extents of every page."""

    pool_type: ClassVar[str] = ""
    # Row order of page_extents: page-major (SGLang) unless a pool lists slot by slot.
    _slot_major: ClassVar[bool] = False
    layout: str
    page_size: int

    @property
    @abstractmethod
    def page_count(self) -> int:
        """N: logical pages the pool hands out (slots for Mamba, blocks for FastDeploy)."""

    @abstractmethod
    def buffers(self) -> tuple[BufferSpec, ...]:
        """The allocations, in get_hybrid_pool_buffer order."""

    @abstractmethod
    def params(self) -> dict[str, Any]:
        """Constructor arguments, JSON-safe; make_geometry(pool_type, **params) rebuilds self."""

    @property
    def has_page_meta(self) -> bool:
        """False where upstream get_page_buffer_meta raises or returns None (docs/pools.md §4)."""
        return True

    def derived(self) -> dict[str, Any]:
        """Pool-specific derived numbers for describe() (size_per_token, page bytes, ...)."""
        return {}

    def _page_slots(self) -> tuple[Slot, ...]:
        """The pointers of one page; geometries with page meta override this or page_extents."""
        raise NoPageMetaError(self._no_meta_message())

    def _no_meta_message(self) -> str:
        return (
            f"pool type {self.pool_type} with layout {self.layout} has no page buffer meta "
            "(upstream get_page_buffer_meta raises; docs/pools.md §4)"
        )

    def check_pages(self, pages: npt.ArrayLike | None) -> Int64Array:
        """Return pages as a 1-D int64 array, all of range(page_count) when None."""
        if pages is None:
            return np.arange(self.page_count, dtype=np.int64)
        array = np.asarray(pages)
        if array.ndim != 1 or (array.size and array.dtype.kind not in "iu"):
            raise GeometryError(f"pages must be a 1-D integer array, got dtype {array.dtype}")
        array = array.astype(np.int64, copy=False)
        if array.size and (array.min() < 0 or array.max() >= self.page_count):
            raise GeometryError(
                f"pages must lie in [0, {self.page_count}), got min {array.min()} max {array.max()}"
            )
        return array

    def page_extents(self, pages: npt.ArrayLike | None = None) -> PageExtents:
        """Extents of the given logical pages (all pages when None), in upstream order."""
        if not self.has_page_meta:
            raise NoPageMetaError(self._no_meta_message())
        return extents_from_slots(
            self.check_pages(pages), self._page_slots(), slot_major=self._slot_major
        )

    def extent_families(self) -> tuple[ExtentFamily, ...]:
        """page_extents() in closed form: one progression per pointer slot, rows numbered as
        page_extents() numbers them; costs O(slots) whatever the page count."""
        if not self.has_page_meta:
            raise NoPageMetaError(self._no_meta_message())
        slots = self._page_slots()
        n, k = self.page_count, len(slots)
        return tuple(
            ExtentFamily(s.buffer, s.base, s.page_stride, s.size, n,
                         j * n if self._slot_major else j, 1 if self._slot_major else k)
            for j, s in enumerate(slots)
        )

    @property
    def total_nbytes(self) -> int:
        return sum(buf.nbytes for buf in self.buffers())

    def describe(self) -> dict[str, Any]:
        """JSON-safe summary: identity, params, buffers with granularity and copy unit."""
        return {
            "pool_type": self.pool_type,
            "layout": self.layout,
            "page_size": self.page_size,
            "page_count": self.page_count,
            "has_page_meta": self.has_page_meta,
            "total_nbytes": self.total_nbytes,
            "params": self.params(),
            "derived": self.derived(),
            "buffers": [buf.as_dict() for buf in self.buffers()],
        }

    @classmethod
    def from_size(cls, size: int, page_size: int, dcp_size: int = 1, **params: Any) -> Self:
        """Build from the base size S0 via host_sizing (docs/pools.md §0)."""
        p, n, _ = host_sizing(size, page_size, dcp_size)
        build: Callable[..., Self] = cls
        return build(page_size=p, page_num=n, **params)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PoolGeometry) or type(other) is not type(self):
            return NotImplemented
        return self.params() == other.params()

    def __hash__(self) -> int:
        return hash((type(self).__name__, json.dumps(self.params(), sort_keys=True)))

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params().items())
        return f"{type(self).__name__}({args})"
