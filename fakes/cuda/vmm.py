"""The driver's virtual memory management (VMM): physical handles, reservations, mappings.

What PyTorch's expandable segments build (docs/cuda-runtime.md §14.2): ``cuMemCreate`` makes
a physical allocation (a handle, no address), ``cuMemAddressReserve`` a range of device
addresses (no memory), ``cuMemMap`` puts a handle's bytes at a reserved address and
``cuMemSetAccess`` makes them usable. The rules are the ``cuda.bindings.driver`` docstrings'
(cuda-bindings 13.5.0, NVIDIA's text) [DOC]: sizes, addresses and offsets are multiples of
the granularity; a mapping goes into a reservation only where nothing is mapped; an unmap
names a whole mapping; a released handle's memory lives while a mapping uses it. Each method
returns a CUresult code; nothing here holds a byte of memory.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass, field

from . import errors as E

__all__ = ["Mapping", "PhysicalAlloc", "Reservation", "VmmState"]


@dataclass
class PhysicalAlloc:
    """A ``cuMemCreate`` handle: its size, device and whether GPUDirect RDMA may pin it
    (``CUmemAllocationProp.allocFlags.gpuDirectRDMACapable``) [DOC]."""

    handle: int
    size: int
    device: int
    rdma_capable: bool
    buffer_id: int
    released: bool = False
    mappings: int = 0


@dataclass(frozen=True)
class Reservation:
    base: int
    size: int

    @property
    def end(self) -> int:
        return self.base + self.size


@dataclass
class Mapping:
    """``cuMemMap(base, size, offset, handle)``; ``access`` is set by cuMemSetAccess."""

    base: int
    size: int
    offset: int
    phys: PhysicalAlloc
    reservation: Reservation
    access: dict[int, int] = field(default_factory=dict)   # device -> CUmemAccess_flags

    @property
    def end(self) -> int:
        return self.base + self.size


class VmmState:
    """The VMM objects of one driver (the driver's lock serialises the calls)."""

    def __init__(self, base: int, granularity: int, next_buffer_id: itertools.count[int]) -> None:
        self.granularity = granularity
        self._next_va = base
        self._handles = itertools.count(0x7A00_0001)
        self._buffer_ids = next_buffer_id
        self.physical: dict[int, PhysicalAlloc] = {}
        self.reservations: dict[int, Reservation] = {}
        self._res_bases: list[int] = []
        self.mappings: dict[int, Mapping] = {}
        self._map_bases: list[int] = []

    def _aligned(self, *values: int) -> bool:
        return all(v % self.granularity == 0 for v in values)

    # -- physical memory ------------------------------------------------------------------
    def create(self, size: int, device: int, rdma_capable: bool) -> tuple[int, int | None]:
        """cuMemCreate: size a positive multiple of the minimum granularity [DOC]."""
        if size == 0 or not self._aligned(size):
            return E.INVALID_VALUE, None
        handle = next(self._handles)
        self.physical[handle] = PhysicalAlloc(handle, size, device, rdma_capable,
                                              next(self._buffer_ids))
        return 0, handle

    def release(self, handle: int) -> int:
        """cuMemRelease: the memory goes when its last mapping goes [DOC]. An unknown handle
        is undefined behaviour in the documentation; the fake answers 1 [INF]."""
        phys = self.physical.get(handle)
        if phys is None or phys.released:
            return E.INVALID_VALUE
        phys.released = True
        if not phys.mappings:
            del self.physical[handle]
        return 0

    # -- address reservations -------------------------------------------------------------
    def reserve(self, size: int, alignment: int, addr: int, flags: int) -> tuple[int, int | None]:
        """cuMemAddressReserve: size a multiple of the page size, alignment 0 or a power of
        two, flags 0 [DOC]; the address is a hint only."""
        if size == 0 or flags or not self._aligned(size) or \
                (alignment and alignment & (alignment - 1)):
            return E.INVALID_VALUE, None
        align = max(alignment, self.granularity)
        base = (self._next_va + align - 1) // align * align
        self._next_va = base + size + self.granularity      # reservations never touch
        res = Reservation(base, size)
        self.reservations[base] = res
        bisect.insort(self._res_bases, base)
        return 0, base

    def free(self, base: int, size: int) -> int:
        """cuMemAddressFree: the exact base and size of a reservation [DOC]; one that still
        holds a mapping -> 1 [INF]."""
        res = self.reservations.get(base)
        if res is None or res.size != size or \
                any(m.reservation is res for m in self.mappings.values()):
            return E.INVALID_VALUE
        del self.reservations[base]
        del self._res_bases[bisect.bisect_left(self._res_bases, base)]
        return 0

    def reservation_of(self, ptr: int) -> Reservation | None:
        i = bisect.bisect_right(self._res_bases, ptr) - 1
        if i < 0:
            return None
        res = self.reservations[self._res_bases[i]]
        return res if ptr < res.end else None

    # -- mappings ---------------------------------------------------------------------------
    def map(self, base: int, size: int, offset: int, handle: int, flags: int) -> int:
        """cuMemMap: inside one reservation, over unmapped addresses, within the handle's
        size, all multiples of the granularity, flags 0 [DOC]."""
        phys = self.physical.get(handle)
        res = self.reservation_of(base)
        if phys is None or phys.released or res is None or flags or size == 0 or \
                not self._aligned(base, size, offset) or base + size > res.end or \
                offset + size > phys.size:
            return E.INVALID_VALUE
        if self.mapping_overlapping(base, size):
            return E.INVALID_VALUE
        mapping = Mapping(base, size, offset, phys, res)
        self.mappings[base] = mapping
        bisect.insort(self._map_bases, base)
        phys.mappings += 1
        return 0

    def unmap(self, base: int, size: int) -> int:
        """cuMemUnmap: the whole mapping, never a part of one [DOC]."""
        mapping = self.mappings.get(base)
        if mapping is None or mapping.size != size:
            return E.INVALID_VALUE
        del self.mappings[base]
        del self._map_bases[bisect.bisect_left(self._map_bases, base)]
        phys = mapping.phys
        phys.mappings -= 1
        if phys.released and not phys.mappings:
            del self.physical[phys.handle]
        return 0

    def set_access(self, base: int, size: int, device: int, flags: int) -> int:
        """cuMemSetAccess: the range must be fully mapped [DOC]."""
        covering = self.mappings_covering(base, size)
        if covering is None:
            return E.INVALID_VALUE
        for mapping in covering:
            mapping.access[device] = flags
        return 0

    def mapping_of(self, ptr: int) -> Mapping | None:
        i = bisect.bisect_right(self._map_bases, ptr) - 1
        if i < 0:
            return None
        mapping = self.mappings[self._map_bases[i]]
        return mapping if ptr < mapping.end else None

    def mapping_overlapping(self, base: int, size: int) -> bool:
        i = bisect.bisect_left(self._map_bases, base + size)
        if i == 0:
            return False
        return self.mappings[self._map_bases[i - 1]].end > base

    def mappings_covering(self, base: int, size: int) -> list[Mapping] | None:
        """The mappings that cover ``[base, base+size)`` with no gap, in order; None when a
        byte of it is not mapped."""
        out: list[Mapping] = []
        at, end = base, base + size
        while at < end:
            mapping = self.mapping_of(at)
            if mapping is None:
                return None
            out.append(mapping)
            at = mapping.end
        return out if size else None
