"""The driver's table of pinned host ranges, with byte-exact overlap rules.

Registrations are kept exactly as the caller passed them (docs/cuda-runtime.md §11.1): a
``SortedBases`` set for the overlap check (cheap inserts, deletes and predecessor queries
anywhere, so a teardown of 100 000 chunks in any order stays cheap) and a dict for
exact-base lookups. Copy
validation classifies whole batches of host ranges at once with numpy (``classify``), so a
batch of a million page descriptors is checked without a Python loop per descriptor.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

import numpy as np

from .sorted_bases import SortedBases

__all__ = ["MIXED", "PAGEABLE", "PINNED", "SPANS", "Pinned", "PinnedRegistry"]

PAGE = 4096

# classification of a host range against the pinned ranges (docs/cuda-runtime.md §5.1, §5.4)
PAGEABLE = 0   # touches no pinned range: the staged (pageable) path
PINNED = 1     # wholly inside one pinned range: the DMA path
SPANS = 2      # wholly pinned, but by two or more adjacent, separate ranges [UNC]
MIXED = 3      # partly pinned, partly not: cudaErrorInvalidValue [DOC]

CLASS_NAMES = {PAGEABLE: "pageable", PINNED: "pinned", SPANS: "spans registrations",
               MIXED: "partly registered"}


class Pinned(NamedTuple):
    """One pinned host range: a cudaHostRegister call or a cudaHostAlloc block.

    A NamedTuple because one is built per cudaHostRegister call (the hot path).
    """

    base: int
    size: int
    flags: int
    kind: str        # "register" | "host_alloc"
    device: int
    seq: int         # order of creation, for reports
    alias: int       # the device pointer (== base when alias == host VA)

    @property
    def end(self) -> int:
        return self.base + self.size


class PinnedRegistry:
    """Pinned host ranges, byte-disjoint by construction."""

    def __init__(self) -> None:
        self._bases = SortedBases()
        self._by_base: dict[int, Pinned] = {}
        self._version = 0
        self._arrays_version = -1
        self._arr_bases = np.empty(0, np.int64)
        self._arr_ends = np.empty(0, np.int64)
        self._arr_run_end = np.empty(0, np.int64)

    def __len__(self) -> int:
        return len(self._bases)

    def __iter__(self):  # type: ignore[no-untyped-def]
        by = self._by_base
        return (by[b] for b in self._bases)

    def add(self, entry: Pinned) -> None:
        self._bases.add(entry.base)
        self._by_base[entry.base] = entry
        self._version += 1

    def remove(self, base: int) -> Pinned:
        entry = self._by_base.pop(base)
        self._bases.remove(base)
        self._version += 1
        return entry

    def remove_registered(self, base: int) -> Pinned | None:
        """Remove the cudaHostRegister range starting exactly at ``base`` and return it.

        None, and nothing changes, when no such range exists (the unregister hot path: one
        call instead of ``get`` then ``remove``).
        """
        entry = self._by_base.get(base)
        if entry is None or entry.kind != "register":
            return None
        del self._by_base[base]
        self._bases.remove(base)
        self._version += 1
        return entry

    def get(self, base: int) -> Pinned | None:
        return self._by_base.get(base)

    def containing(self, ptr: int) -> Pinned | None:
        """The range holding byte ``ptr``, if any."""
        base = self._bases.floor(ptr)
        if base is None:
            return None
        entry = self._by_base[base]
        return entry if ptr < entry.base + entry.size else None

    def first_overlap(self, base: int, size: int,
                      granularity: Literal["byte", "page"] = "byte") -> Pinned | None:
        """A pinned range sharing a byte (or, in "page" mode, a 4 KiB page) with the query.

        Ranges are disjoint and sorted, so the last one starting before the query's end
        has the largest end among its predecessors: checking it alone is exact.
        """
        end = base + size
        if granularity == "page":
            lo, hi = base & ~(PAGE - 1), (end + PAGE - 1) & ~(PAGE - 1)
        else:
            lo, hi = base, end
        last = self._bases.floor(hi, strict=True)
        if last is None:
            return None
        entry = self._by_base[last]
        entry_end = entry.base + entry.size
        if granularity == "page":
            entry_end = (entry_end + PAGE - 1) & ~(PAGE - 1)
        return entry if entry_end > lo else None

    # -- vectorised copy classification ---------------------------------------------------
    def _arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(bases, ends, run ends), each padded for a position ``p`` of
        ``searchsorted(bases, ptr, side="right")``: ``ends[p]`` / ``run_end[p]`` are those of
        the range at or before ``ptr`` (a sentinel below every pointer at 0: none), and
        ``bases[p]`` is the next range's base (a sentinel above every pointer at the end)."""
        if self._arrays_version != self._version:
            by = self._by_base
            bases = np.fromiter(self._bases, np.int64, len(self._bases))
            ends = np.fromiter((by[b].end for b in self._bases), np.int64, len(self._bases))
            # run_end[i]: end of the chain of exactly adjacent ranges that starts at or before i
            run_end = ends.copy()
            if len(bases) > 1:
                adjacent = bases[1:] == ends[:-1]
                # walk chains backwards with a cumulative trick: the run id increments where
                # adjacency breaks; the run's end is the end of its last member.
                run_id = np.concatenate(([0], np.cumsum(~adjacent)))
                last_of_run = np.r_[run_id[1:] != run_id[:-1], True]
                run_end = ends[last_of_run][run_id]
            low, high = np.iinfo(np.int64).min, np.iinfo(np.int64).max
            self._arr_bases = np.concatenate((bases, [high]))
            self._arr_ends = np.concatenate(([low], ends))
            self._arr_run_end = np.concatenate(([low], run_end))
            self._arrays_version = self._version
        return self._arr_bases, self._arr_ends, self._arr_run_end

    def classify(self, ptrs: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Classify host ranges ``[ptr, ptr+size)``: (classes, index of the range at ptr).

        The index is -1 where ``ptr`` itself is not pinned.
        """
        ptrs = np.asarray(ptrs, dtype=np.int64)
        ends_q = ptrs + np.asarray(sizes, dtype=np.int64)
        bases, ends, run_end = self._arrays()
        out = np.zeros(ptrs.shape, np.int8)
        if len(bases) == 1:
            return out, np.full(ptrs.shape, -1, np.int64)
        pos = np.searchsorted(bases[:-1], ptrs, side="right")
        end_at = ends[pos]
        starts_pinned = ptrs < end_at
        # a range that starts unpinned is mixed when some pinned range begins before its end
        out[~starts_pinned & (bases[pos] < ends_q)] = MIXED
        inside = starts_pinned & (ends_q <= end_at)
        out[inside] = PINNED
        # the few that start pinned and leave their range: inside a run of adjacent ones, or
        # partly pageable
        rest = np.flatnonzero(starts_pinned & ~inside)
        if len(rest):
            out[rest] = np.where(ends_q[rest] <= run_end[pos[rest]], SPANS, MIXED)
        return out, np.where(starts_pinned, pos - 1, -1)

    def touching(self, ptr: int, size: int) -> tuple[Pinned, ...]:
        """Every pinned range that shares a byte with ``[ptr, ptr+size)``, in address order."""
        by = self._by_base
        out = []
        end = ptr + size
        for base in self._bases.iter_from(ptr):
            if base >= end:
                break
            entry = by[base]
            if entry.base + entry.size > ptr:
                out.append(entry)
        return tuple(out)

    def entry_at_index(self, i: int) -> Pinned:
        """The i-th range in address order (for reports; O(n))."""
        for k, base in enumerate(self._bases):
            if k == i:
                return self._by_base[base]
        raise IndexError(i)
