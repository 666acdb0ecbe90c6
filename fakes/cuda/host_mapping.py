"""Is a host range mapped memory? The check behind "range not fully mapped" -> 1.

docs/cuda-runtime.md §2.2 [OBS-ext]: registering a range that is not fully mapped in the
process gives cudaErrorInvalidValue (HIP test "invalid memory size"), and so does an address
inside CUDA's reserved VA (openucx/ucx #8827, MAP_FIXED at 0xff0000000). The answer comes
from where the range lives:

- virtual buffers (real tensors over reserved memory, :mod:`kvreg.fakes.reserved`) and reserved
  ranges (bit 60 set): the fake's own address space; a buffer's mapping ends at its end
  rounded up to a 4 KiB page, as an mmap of that size would (a reserved tensor is mapped
  exactly so, between ``PROT_NONE`` guards, so this is also what ``/proc/self/maps`` says
  while it lives; the answer needs no read of the file);
- device memory and device aliases (at and above ``VIRTUAL_LIMIT``): never host memory;
- real process memory: ``/proc/self/maps`` through :mod:`.procmaps` (the reader the verbs
  fake uses too), read again for every register, as the driver looks at the live page tables:
  a cached hit can be stale (memory unmapped since, or a ``PROT_NONE`` guard where a readable
  mapping was; a shuffled test run registered so across a freed buffer's guard page). No
  register of the bundled catalog comes here (its buffers are the space's), so the read
  costs the catalog nothing. Where the file does not exist the range is taken as mapped,
  since nothing better is known.
"""

from __future__ import annotations

from ..address_space import VIRTUAL_BASE, VIRTUAL_LIMIT, AddressSpace
from ..procmaps import ProcessMaps, process_maps

__all__ = ["PAGE", "range_is_mapped", "virtual_extent"]

PAGE = 4096


def _real_range_is_mapped(maps: ProcessMaps, ptr: int, size: int) -> bool:
    """From the process's mappings as they are now; where the system has no
    ``/proc/self/maps`` the range is taken as mapped, since nothing better is known."""
    if not maps.available:
        return True
    return maps.is_mapped(ptr, size, fresh=True)


def virtual_extent(space: AddressSpace, ptr: int) -> tuple[int, int] | None:
    """The mapped extent ``(base, page-rounded end)`` of the virtual buffer holding ``ptr``."""
    hit = space.owner(ptr)
    if hit is None or hit[0].kind == "device" or (ptr < VIRTUAL_BASE and hit[0].kind != "virtual"):
        return None
    alloc = hit[0]
    return alloc.base, (alloc.base + alloc.size + PAGE - 1) & ~(PAGE - 1)


def range_is_mapped(space: AddressSpace, ptr: int, size: int,
                    reserved: tuple[tuple[int, int], ...] = (),
                    maps: ProcessMaps | None = None) -> bool:
    """Whether ``[ptr, ptr+size)`` is host memory the driver could pin."""
    end = ptr + size
    if ptr >= VIRTUAL_BASE:
        if end > VIRTUAL_LIMIT:
            return False
        extent = virtual_extent(space, ptr)
        return extent is not None and end <= extent[1]
    for lo, hi in reserved:
        if ptr < hi and end > lo:
            return False
    extent = virtual_extent(space, ptr)
    if extent is not None:
        return end <= extent[1]
    return _real_range_is_mapped(maps or process_maps(), ptr, size)
