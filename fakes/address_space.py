"""A simulated host address space: real buffers by address, virtual buffers of any size.

Virtual buffers live at non-canonical x86-64 addresses (bit 60 set), which no real
allocation can have, so a fake registration of a virtual pool can never alias real memory,
and 4 TiB costs no RAM. Real buffers (torch tensors, numpy arrays, bytearrays, anything
with the buffer protocol) are tracked by their true address so traces can name them.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .dtypes import DType, as_dtype

__all__ = ["VIRTUAL_BASE", "AddressSpace", "Allocation", "VirtualStorage", "VirtualTensor",
           "buffer_address"]

VIRTUAL_BASE = 1 << 60          # non-canonical on x86-64 and aarch64: never a real address
VIRTUAL_LIMIT = 2 << 60         # host virtual memory ends where device aliases begin
DEFAULT_ALIGN = 2 << 20         # like a 2 MiB hugepage-aligned mmap
GUARD = 1 << 30                 # a gap between virtual buffers, so they never touch


@dataclass(frozen=True)
class Allocation:
    """One named range of the address space."""

    base: int
    size: int
    name: str
    kind: str  # "virtual" | "real" | "host_alloc" | "device"

    @property
    def end(self) -> int:
        return self.base + self.size


def buffer_address(obj: Any) -> tuple[int, int]:
    """(address, nbytes) of a tensor, numpy array or buffer-protocol object.

    TypeError says what is accepted, so a wrong object never gets a made-up address.
    """
    if hasattr(obj, "data_ptr") and callable(obj.data_ptr):
        nbytes = obj.nbytes if hasattr(obj, "nbytes") else obj.numel() * obj.element_size()
        return int(obj.data_ptr()), int(nbytes)
    if isinstance(obj, np.ndarray):
        return int(obj.__array_interface__["data"][0]), int(obj.nbytes)
    try:
        view = memoryview(obj)
    except TypeError:
        raise TypeError(
            "expected a tensor (data_ptr()), a numpy array or a buffer-protocol object, "
            f"got {type(obj).__name__}"
        ) from None
    arr = np.frombuffer(view.cast("B"), dtype=np.uint8)
    return (int(arr.__array_interface__["data"][0]) if arr.size else 0), int(arr.nbytes)


class VirtualStorage:
    """What ``tensor.untyped_storage()`` returns: the whole allocation behind a view."""

    __slots__ = ("_nbytes", "_ptr")

    def __init__(self, ptr: int, nbytes: int) -> None:
        self._ptr = ptr
        self._nbytes = nbytes

    def data_ptr(self) -> int:
        return self._ptr

    def nbytes(self) -> int:
        return self._nbytes

    def size(self) -> int:
        return self._nbytes


class VirtualTensor:
    """A tensor-shaped view of virtual memory: the surface registration code touches.

    It offers ``data_ptr()``, ``numel()``, ``element_size()``, ``nbytes``, ``shape``,
    ``dtype``, ``size()``, ``stride()``, ``dim()``, integer indexing on the leading dim
    (``kv_buffer[1]`` is the V half) and free attribute assignment, as torch tensors do.
    Its memory has no bytes: reading data raises TypeError rather than inventing values.
    """

    def __init__(self, ptr: int, shape: Sequence[int], dtype: Any,
                 storage: VirtualStorage | None = None) -> None:
        self._ptr = int(ptr)
        self._shape = tuple(int(d) for d in shape)
        if any(d < 0 for d in self._shape):
            raise ValueError(f"negative dimension in shape {self._shape}")
        self._dtype = as_dtype(dtype)
        self._storage = storage or VirtualStorage(self._ptr, self.nbytes)

    # -- the torch surface ------------------------------------------------------------
    def data_ptr(self) -> int:
        return self._ptr

    def numel(self) -> int:
        return math.prod(self._shape)

    def element_size(self) -> int:
        return self._dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.numel() * self._dtype.itemsize

    @property
    def itemsize(self) -> int:
        return self._dtype.itemsize

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    @property
    def dtype(self) -> DType:
        return self._dtype

    @property
    def device(self) -> str:
        return "cpu"

    @property
    def is_virtual(self) -> bool:
        return True

    def size(self, dim: int | None = None) -> tuple[int, ...] | int:
        return self._shape if dim is None else self._shape[dim]

    def dim(self) -> int:
        return len(self._shape)

    def stride(self) -> tuple[int, ...]:
        out, acc = [], 1
        for d in reversed(self._shape):
            out.append(acc)
            acc *= d
        return tuple(reversed(out))

    def is_contiguous(self) -> bool:
        return True

    def is_pinned(self) -> bool:
        return False

    def untyped_storage(self) -> VirtualStorage:
        return self._storage

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-d tensor")
        return self._shape[0]

    def __getitem__(self, index: int) -> VirtualTensor:
        if not isinstance(index, int) or isinstance(index, bool):
            raise TypeError("virtual tensors support integer indexing on the leading dim only")
        if not self._shape:
            raise IndexError("invalid index of a 0-dim tensor")
        n = self._shape[0]
        if not -n <= index < n:
            raise IndexError(f"index {index} is out of bounds for dimension 0 with size {n}")
        index %= n
        inner = self._shape[1:]
        step = math.prod(inner) * self._dtype.itemsize
        return VirtualTensor(self._ptr + index * step, inner, self._dtype, self._storage)

    def __iter__(self) -> Iterator[VirtualTensor]:
        for i in range(len(self)):
            yield self[i]

    def __repr__(self) -> str:
        return (f"VirtualTensor(ptr={self._ptr:#x}, shape={self._shape}, "
                f"dtype={self._dtype}, nbytes={self.nbytes})")


class AddressSpace:
    """Allocations by address: virtual buffers it hands out and real ones it is told of.

    Every instance is independent (no global state), so tests can run in parallel.
    """

    def __init__(self, base: int = VIRTUAL_BASE) -> None:
        self._next = base
        self._bases: list[int] = []
        self._allocs: dict[int, Allocation] = {}
        self._objects: dict[int, Any] = {}  # keeps tracked real buffers alive
        # bumped when an allocation is dropped, so cached "is mapped" answers can expire
        self.generation = 0

    # -- virtual memory ---------------------------------------------------------------
    def reserve(self, nbytes: int, *, name: str = "", align: int = DEFAULT_ALIGN,
                kind: str = "virtual") -> int:
        """Reserve ``nbytes`` of virtual addresses (no RAM) and return the base."""
        if not isinstance(nbytes, int) or isinstance(nbytes, bool):
            raise TypeError(f"nbytes must be an int, got {type(nbytes).__name__}")
        if nbytes < 0:
            raise ValueError(f"nbytes must be >= 0, got {nbytes}")
        if align <= 0 or align & (align - 1):
            raise ValueError(f"align must be a positive power of two, got {align}")
        base = (self._next + align - 1) & ~(align - 1)
        end = base + max(nbytes, 1)
        if end + GUARD > VIRTUAL_LIMIT:
            raise MemoryError("virtual address space exhausted")
        self._next = end + GUARD
        self._insert(Allocation(base, nbytes, name or f"virtual@{base:#x}", kind))
        return base

    def virtual(self, shape: Sequence[int] | int, dtype: Any = "uint8", *, name: str = "",
                align: int = DEFAULT_ALIGN) -> VirtualTensor:
        """A new virtual tensor of any size; 4 TiB costs a few hundred bytes."""
        dims = (shape,) if isinstance(shape, int) else tuple(shape)
        dt = as_dtype(dtype)
        if any(not isinstance(d, int) or isinstance(d, bool) for d in dims):
            raise TypeError(f"shape must hold ints, got {dims!r}")
        if any(d < 0 for d in dims):
            raise ValueError(f"negative dimension in shape {dims}")
        nbytes = math.prod(dims) * dt.itemsize
        ptr = self.reserve(nbytes, name=name, align=align)
        return VirtualTensor(ptr, dims, dt)

    def is_virtual(self, ptr: int) -> bool:
        return VIRTUAL_BASE <= ptr < VIRTUAL_LIMIT

    # -- real memory --------------------------------------------------------------------
    def track(self, obj: Any, *, name: str = "") -> Allocation:
        """Remember a real buffer (tensor, array, bytearray) so traces can name it."""
        ptr, nbytes = buffer_address(obj)
        alloc = Allocation(ptr, nbytes, name or f"{type(obj).__name__}@{ptr:#x}", "real")
        if ptr in self._allocs:
            self.forget(ptr)
        self._insert(alloc)
        self._objects[ptr] = obj
        return alloc

    def forget(self, base: int) -> None:
        """Drop an allocation record (the fake never unregisters on free: docs/cuda-runtime.md
        §2.2)."""
        if self._allocs.pop(base, None) is not None:
            self.generation += 1
            i = bisect.bisect_left(self._bases, base)
            del self._bases[i]
            self._objects.pop(base, None)

    def add(self, alloc: Allocation) -> None:
        self._insert(alloc)

    # -- lookups ------------------------------------------------------------------------
    def owner(self, ptr: int) -> tuple[Allocation, int] | None:
        """The allocation holding byte ``ptr`` and the offset into it, or None."""
        i = bisect.bisect_right(self._bases, ptr) - 1
        if i < 0:
            return None
        alloc = self._allocs[self._bases[i]]
        if ptr < alloc.end or (alloc.size == 0 and ptr == alloc.base):
            return alloc, ptr - alloc.base
        return None

    def describe(self, ptr: int) -> str:
        """``"kv_buffer+0x40000000"`` for a known address, else the hex address."""
        hit = self.owner(ptr)
        if hit is None:
            return f"{ptr:#x}"
        alloc, off = hit
        return f"{alloc.name}+{off:#x}" if off else alloc.name

    def allocations(self) -> list[Allocation]:
        return [self._allocs[b] for b in self._bases]

    def _insert(self, alloc: Allocation) -> None:
        bisect.insort(self._bases, alloc.base)
        self._allocs[alloc.base] = alloc
