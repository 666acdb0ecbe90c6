"""A simulated host address space: buffers by address, so traces can name every pointer.

Three sorts of range:

- virtual buffers (:meth:`AddressSpace.virtual`): real ``torch.Tensor``s of any size over
  reserved process memory (:mod:`.reserved`: 4 TiB costs no RAM until pages are touched). The
  code under test gets a CPU tensor at a real address; the fakes treat the range as
  registration-only memory (they never move its bytes, so a transfer over a 4 TiB pool costs
  no RAM either). :meth:`AddressSpace.release` ends them when the scenario ends;
- reserved address ranges (:meth:`AddressSpace.reserve`: ``cudaHostAlloc`` above its real
  limit, Mooncake segments, big pyverbs MR buffers) that the fakes hand out as bare pointers:
  non-canonical x86-64 addresses (bit 60 set), which no real allocation can have;
- real buffers the code made itself (torch tensors, numpy arrays, bytearrays, anything with
  the buffer protocol), tracked by their true address.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from . import reserved

if TYPE_CHECKING:
    import torch

__all__ = ["VIRTUAL_BASE", "AddressSpace", "Allocation", "buffer_address"]

VIRTUAL_BASE = 1 << 60          # non-canonical on x86-64 and aarch64: never a real address
VIRTUAL_LIMIT = 2 << 60         # host virtual memory ends where device aliases begin
DEFAULT_ALIGN = reserved.DEFAULT_ALIGN  # like a 2 MiB hugepage-aligned mmap
GUARD = 1 << 30                 # a gap between virtual buffers, so they never touch


@dataclass(frozen=True)
class Allocation:
    """One named range of the address space."""

    base: int
    size: int
    name: str
    kind: str  # "virtual" (a reserved tensor or range) | "real" | "host_alloc" | "device"

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


class AddressSpace:
    """Allocations by address: virtual buffers it hands out and real ones it is told of.

    Every instance is independent (no global state), so tests can run in parallel.
    """

    def __init__(self, base: int = VIRTUAL_BASE) -> None:
        self._next = base
        self._bases: list[int] = []
        self._allocs: dict[int, Allocation] = {}
        self._objects: dict[int, Any] = {}  # keeps tracked real buffers alive
        self._reserved: dict[int, reserved.Reservation] = {}  # keeps virtual buffers mapped
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
                align: int = DEFAULT_ALIGN, offset: int = 0) -> torch.Tensor:
        """A new CPU ``torch.Tensor`` of any size over reserved memory (4 TiB costs no RAM
        until touched); it stays mapped until :meth:`release` and nothing else holds it.
        Its base is ``offset`` bytes past an ``align``-aligned address (torch's own large
        tensors sit 64 bytes into a page: scenarios/FORMAT.md, ``base_offset``)."""
        dims = (shape,) if isinstance(shape, int) else tuple(shape)
        name = name or f"virtual{len(self._reserved)}"
        tensor, res = reserved.reserve(shape=dims, dtype=dtype, name=name, align=align,
                                       offset=offset)
        self._reserved[res.base] = res
        self._insert(Allocation(res.base, res.nbytes, name, "virtual"))
        return tensor

    def is_virtual(self, ptr: int) -> bool:
        """Registration-only memory: a reserved range, or inside a virtual buffer."""
        if VIRTUAL_BASE <= ptr < VIRTUAL_LIMIT:
            return True
        hit = self.owner(ptr)
        return hit is not None and hit[0].kind == "virtual"

    def release(self) -> int:
        """End this space's virtual buffers (the scenario is over); returns the bytes their
        touched pages took. Their RAM is freed now and their mappings go once nothing else
        holds the tensors; the records stay, so traces still name the pointers."""
        touched = 0
        for res in self._reserved.values():
            touched += res.resident_bytes()
            reserved.release(res)
        self._reserved.clear()
        return touched

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

    def add_device(self, base: int, store: Any, name: str) -> Allocation:
        """Device memory with bytes (a :class:`~kvreg.fakes.device_bytes.SparseBytes`):
        transfers over it move bytes through ``store`` (fakes/verbs/memory.py)."""
        alloc = Allocation(base, store.size, name, "device")
        self._insert(alloc)
        self._objects[base] = store
        return alloc

    def device_bytes(self, ptr: int, nbytes: int) -> tuple[Any, int] | None:
        """(store, offset) of a range wholly inside one device allocation with bytes."""
        hit = self.owner(ptr)
        if hit is None or hit[0].kind != "device" or ptr + nbytes > hit[0].end:
            return None
        store = self._objects.get(hit[0].base)
        return (store, hit[1]) if store is not None else None

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
