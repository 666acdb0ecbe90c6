"""Sorted, disjoint page ranges ``[lo, hi)`` as plain lists (so they travel as JSON).

The host keeps what is resident or pinned in page ranges rather than page sets, so a TiB
region costs a few numbers, not millions of pages.
"""

from __future__ import annotations

import bisect

__all__ = ["PAGE", "add", "count", "covered", "gaps", "page_span", "remove", "union_count"]

PAGE = 4096

Ranges = list[list[int]]


def page_span(offset: int, nbytes: int) -> tuple[int, int]:
    """The pages ``[lo, hi)`` that bytes ``[offset, offset + nbytes)`` touch."""
    if nbytes <= 0:
        return offset // PAGE, offset // PAGE
    return offset // PAGE, -(-(offset + nbytes) // PAGE)


def count(ranges: Ranges) -> int:
    return sum(hi - lo for lo, hi in ranges)


def _overlapping(ranges: Ranges, lo: int, hi: int) -> tuple[int, int]:
    """Indices ``[i, j)`` of the ranges that overlap or touch ``[lo, hi)``."""
    i = bisect.bisect_left(ranges, lo, key=lambda r: r[1])
    j = bisect.bisect_right(ranges, hi, key=lambda r: r[0])
    return i, j


def covered(ranges: Ranges, lo: int, hi: int) -> int:
    """Pages of ``[lo, hi)`` already in ``ranges``."""
    i = bisect.bisect_right(ranges, lo, key=lambda r: r[1])
    n = 0
    while i < len(ranges) and ranges[i][0] < hi:
        a, b = ranges[i]
        n += min(hi, b) - max(lo, a)
        i += 1
    return n


def add(ranges: Ranges, lo: int, hi: int) -> tuple[Ranges, int]:
    """(``ranges`` with ``[lo, hi)`` added, how many pages were not there before)."""
    if hi <= lo:
        return ranges, 0
    i, j = _overlapping(ranges, lo, hi)
    merged = ranges[i:j]
    covered = sum(max(0, min(hi, b) - max(lo, a)) for a, b in merged)
    new_lo = min([lo, *(a for a, _ in merged)])
    new_hi = max([hi, *(b for _, b in merged)])
    return [*ranges[:i], [new_lo, new_hi], *ranges[j:]], (hi - lo) - covered


def remove(ranges: Ranges, lo: int, hi: int) -> tuple[Ranges, int]:
    """(``ranges`` without ``[lo, hi)``, how many pages were removed)."""
    if hi <= lo:
        return ranges, 0
    out: Ranges = []
    removed = 0
    for a, b in ranges:
        if b <= lo or a >= hi:
            out.append([a, b])
            continue
        removed += min(hi, b) - max(lo, a)
        if a < lo:
            out.append([a, lo])
        if b > hi:
            out.append([hi, b])
    return out, removed


def union_count(many: list[Ranges]) -> int:
    """Pages in the union of several range lists."""
    merged: Ranges = []
    for ranges in many:
        for lo, hi in ranges:
            merged, _ = add(merged, lo, hi)
    return count(merged)


def gaps(ranges: Ranges, lo: int, hi: int) -> Ranges:
    """The pieces of ``[lo, hi)`` not in ``ranges``, in order."""
    out: Ranges = []
    pos = lo
    for a, b in ranges:
        if b <= pos:
            continue
        if a >= hi:
            break
        if a > pos:
            out.append([pos, a])
        pos = max(pos, b)
    if pos < hi:
        out.append([pos, hi])
    return out
