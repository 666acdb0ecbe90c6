"""A sorted set of ints with cheap inserts, deletes and predecessor queries anywhere.

The pinned-range table needs "largest base below x" on every cudaHostRegister and
inserts/deletes in any order at 100 000+ live ranges. A flat list pays a memmove of the
whole table per insert or delete (~30 us at 100 000 on the dev machines), and
``SortedList``'s positional indexing costs more than the query itself. Blocks of at most
``LOAD`` sorted ints with a list of block maxima keep every operation at two small bisects.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator

__all__ = ["SortedBases"]

LOAD = 512


class SortedBases:
    """Distinct ints in ascending order."""

    __slots__ = ("_blocks", "_len", "_maxes")

    def __init__(self) -> None:
        self._blocks: list[list[int]] = []
        self._maxes: list[int] = []
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[int]:
        for block in self._blocks:
            yield from block

    def add(self, value: int) -> None:
        maxes = self._maxes
        if not maxes:
            self._blocks.append([value])
            maxes.append(value)
        else:
            b = bisect.bisect_left(maxes, value)
            if b == len(maxes):
                b -= 1
                self._blocks[b].append(value)
                maxes[b] = value
            else:
                bisect.insort(self._blocks[b], value)
            block = self._blocks[b]
            if len(block) > 2 * LOAD:
                self._blocks[b:b + 1] = [block[:LOAD], block[LOAD:]]
                maxes[b:b + 1] = [block[LOAD - 1], block[-1]]
        self._len += 1

    def remove(self, value: int) -> None:
        """Remove ``value``; KeyError if absent."""
        maxes = self._maxes
        b = bisect.bisect_left(maxes, value)
        if b == len(maxes):
            raise KeyError(value)
        block = self._blocks[b]
        i = bisect.bisect_left(block, value)
        if i == len(block) or block[i] != value:
            raise KeyError(value)
        del block[i]
        self._len -= 1
        if not block:
            del self._blocks[b]
            del maxes[b]
        elif i == len(block):
            maxes[b] = block[-1]

    def floor(self, value: int, *, strict: bool = False) -> int | None:
        """The largest member <= value (< value when ``strict``), or None."""
        maxes = self._maxes
        b = bisect.bisect_left(maxes, value) if strict else bisect.bisect_right(maxes, value)
        if b < len(maxes):
            block = self._blocks[b]
            i = (bisect.bisect_left(block, value) if strict
                 else bisect.bisect_right(block, value)) - 1
            if i >= 0:
                return block[i]
        return maxes[b - 1] if b > 0 else None

    def iter_from(self, value: int) -> Iterator[int]:
        """Members >= the floor of ``value`` (or from the start), ascending."""
        start = self.floor(value)
        maxes = self._maxes
        if start is None:
            yield from self
            return
        b = bisect.bisect_left(maxes, start)
        block = self._blocks[b]
        yield from block[bisect.bisect_left(block, start):]
        for blk in self._blocks[b + 1:]:
            yield from blk
