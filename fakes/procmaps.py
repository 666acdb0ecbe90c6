"""Is a range of this process's memory mapped, readable, writable? (``/proc/self/maps``)

The kernel pins the pages of an MR with ``pin_user_pages`` (``ib_umem_get`` in
drivers/infiniband/core/umem.c); a range with an unmapped page fails with EFAULT, and a
writable registration (``ib_access_writable``: LOCAL_WRITE, REMOTE_WRITE, REMOTE_ATOMIC,
MW_BIND) of a read-only mapping fails the same way, because it pins with FOLL_WRITE
(docs/mooncake-verbs.md §5.2, row "range not mapped"). The fake answers the same question from
``/proc/self/maps``: parsed once, kept sorted, and read again when a range is not covered
by what was read last (a miss). A cached answer can be stale (memory unmapped or
``mprotect``-ed since), so two checks are exact: registration (``fresh=True``) reads the
file again, as the kernel looks at the live page tables; and every other hit is confirmed
with ``msync(MS_ASYNC)``, which fails with ENOMEM on any unmapped page, so a transfer into
memory freed after registration is refused instead of crashing the process.

On a system without ``/proc/self/maps`` nothing is known to be mapped
(:func:`available` is False) and callers fall back to explicit tracking.
"""

from __future__ import annotations

import bisect
import ctypes
import ctypes.util
import mmap
import threading
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["ProcessMaps", "available", "is_mapped", "process_maps"]

MAPS_PATH = "/proc/self/maps"


_PAGE = mmap.PAGESIZE
_MS_ASYNC = 1


def _load_msync() -> Callable[[int, int, int], int] | None:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        fn = libc.msync
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


_MSYNC = _load_msync()


def _all_pages_mapped(ptr: int, nbytes: int) -> bool:
    """msync fails with ENOMEM if a page of the range is unmapped (exact, one syscall)."""
    if _MSYNC is None:
        return True
    start = ptr - ptr % _PAGE
    length = ptr + max(nbytes, 1) - start
    return _MSYNC(start, length, _MS_ASYNC) == 0


@dataclass(frozen=True)
class _Table:
    starts: list[int]
    ends: list[int]
    readable: list[bool]
    writable: list[bool]


def _parse(text: str) -> _Table:
    """Merge adjacent mappings of the same permissions into runs; sorted by start."""
    starts: list[int] = []
    ends: list[int] = []
    readable: list[bool] = []
    writable: list[bool] = []
    for line in text.splitlines():
        fields = line.split(None, 2)
        if len(fields) < 2 or "-" not in fields[0]:
            continue
        lo, hi = fields[0].split("-", 1)
        start, end = int(lo, 16), int(hi, 16)
        r, w = fields[1][:1] == "r", fields[1][1:2] == "w"
        if starts and ends[-1] == start and readable[-1] == r and writable[-1] == w:
            ends[-1] = end
            continue
        starts.append(start)
        ends.append(end)
        readable.append(r)
        writable.append(w)
    return _Table(starts, ends, readable, writable)


class ProcessMaps:
    """A cached view of one process's mappings (``path`` is ``/proc/self/maps``)."""

    def __init__(self, path: str = MAPS_PATH) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._table: _Table | None = None
        self.reads = 0      # how often the file was parsed (a miss costs one read)

    @property
    def available(self) -> bool:
        if self._table is not None:
            return True                          # read before: no need to read again
        try:
            self._load()
        except OSError:
            return False
        return True

    def refresh(self) -> None:
        """Read the mappings now."""
        self._load()

    def _load(self) -> _Table:
        with open(self._path, encoding="ascii", errors="replace") as fh:
            table = _parse(fh.read())
        with self._lock:
            self._table = table
            self.reads += 1
        return table

    @staticmethod
    def _covers(table: _Table, ptr: int, nbytes: int, write: bool) -> bool:
        pos, end = ptr, ptr + max(nbytes, 1)
        i = bisect.bisect_right(table.starts, pos) - 1
        while pos < end:
            if i < 0 or i >= len(table.starts) or not table.starts[i] <= pos < table.ends[i]:
                return False
            if not table.readable[i] or (write and not table.writable[i]):
                return False
            pos = table.ends[i]
            i += 1
        return True

    def is_mapped(self, ptr: int, nbytes: int, *, write: bool = False,
                  fresh: bool = False, confirm: bool = True) -> bool:
        """Every page of ``[ptr, ptr+nbytes)`` is mapped readable (and writable if asked).

        ``fresh``: read the mappings now (a registration pins the live page tables).
        ``confirm``: check a cached hit with msync; without it a hit costs no system call
        (and memory unmapped since the last read still reads as mapped).
        """
        if ptr < 0 or nbytes < 0 or ptr + nbytes > 1 << 64:
            return False
        table = self._table
        if not fresh and table is not None and self._covers(table, ptr, nbytes, write):
            return _all_pages_mapped(ptr, nbytes) if confirm else True
        try:
            table = self._load()                 # a miss: the mappings may have grown
        except OSError:
            return False
        return self._covers(table, ptr, nbytes, write)


_PROCESS = ProcessMaps()


def process_maps() -> ProcessMaps:
    """The mappings of this process (one cache: there is one address space per process)."""
    return _PROCESS


def available() -> bool:
    """Whether this system lets the fake check mappings (Linux ``/proc``)."""
    return _PROCESS.available


def is_mapped(ptr: int, nbytes: int, *, write: bool = False, fresh: bool = False) -> bool:
    """See :meth:`ProcessMaps.is_mapped`."""
    return _PROCESS.is_mapped(ptr, nbytes, write=write, fresh=fresh)
