"""Is a host range mapped memory? The check behind "range not fully mapped" -> 1.

docs/cuda-runtime.md §2.2 [OBS-ext]: registering a range that is not fully mapped in the
process gives cudaErrorInvalidValue (HIP test "invalid memory size"), and so does an address
inside CUDA's reserved VA (openucx/ucx #8827, MAP_FIXED at 0xff0000000). The answer comes
from where the range lives:

- virtual buffers (bit 60 set): the fake's own address space; a buffer's mapping ends at its
  end rounded up to a 4 KiB page, as an mmap of that size would;
- device memory and device aliases (at and above ``VIRTUAL_LIMIT``): never host memory;
- real process memory: ``/proc/self/maps``, read once and re-read only when a range is not
  found (new mappings appear; a hit never costs a read). Where the file does not exist the
  range is taken as mapped, since nothing better is known.
"""

from __future__ import annotations

import bisect
import threading
from pathlib import Path

from .address_space import VIRTUAL_BASE, VIRTUAL_LIMIT, AddressSpace

__all__ = ["PAGE", "ProcessMaps", "range_is_mapped", "virtual_extent"]

PAGE = 4096


class ProcessMaps:
    """The process's accessible mappings, merged into disjoint runs, cached."""

    def __init__(self, path: str = "/proc/self/maps") -> None:
        self._path = Path(path)
        self._lock = threading.Lock()
        # (starts, ends) replaced as one tuple, so a reader never sees halves of two reads
        self._runs: tuple[list[int], list[int]] = ([], [])
        self.reads = 0
        self.available = self._path.exists()

    def refresh(self) -> None:
        runs: list[list[int]] = []
        for line in self._path.read_text().splitlines():
            fields = line.split()
            if len(fields) < 2 or fields[1].startswith("---"):
                continue   # PROT_NONE guard and reservation pages are not usable memory
            lo, _, hi = fields[0].partition("-")
            start, end = int(lo, 16), int(hi, 16)
            if runs and runs[-1][1] == start:
                runs[-1][1] = end
            else:
                runs.append([start, end])
        with self._lock:
            self._runs = ([r[0] for r in runs], [r[1] for r in runs])
            self.reads += 1

    def _covered(self, ptr: int, end: int) -> bool:
        starts, ends = self._runs
        i = bisect.bisect_right(starts, ptr) - 1
        return i >= 0 and end <= ends[i]

    def covers(self, ptr: int, size: int) -> bool:
        """True when every page of ``[ptr, ptr+size)`` is mapped (re-reads on a miss)."""
        if not self.available:
            return True
        end = ptr + size
        if self._covered(ptr, end):
            return True
        self.refresh()
        return self._covered(ptr, end)


PROCESS_MAPS = ProcessMaps()


def virtual_extent(space: AddressSpace, ptr: int) -> tuple[int, int] | None:
    """The mapped extent ``(base, page-rounded end)`` of the virtual buffer holding ``ptr``."""
    hit = space.owner(ptr)
    if hit is None or hit[0].kind == "device":
        return None
    alloc = hit[0]
    return alloc.base, (alloc.base + alloc.size + PAGE - 1) & ~(PAGE - 1)


def range_is_mapped(space: AddressSpace, ptr: int, size: int,
                    reserved: tuple[tuple[int, int], ...] = (),
                    maps: ProcessMaps = PROCESS_MAPS) -> bool:
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
    return maps.covers(ptr, size)
