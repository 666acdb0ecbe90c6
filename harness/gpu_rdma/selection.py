"""Which pages of each buffer the transfers write: the ones that decide.

Whether a page transfers depends only on the registrations around it (the engine checks a
range lies inside one published buffer, docs/mooncake-verbs.md §8.4), so the pages that decide
are the first and the last of each buffer and those on either side of any edge of a published
buffer inside it; every other page lies in the same registration as one of these. The cost is
the registrations', never the page count.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["deciding_pages"]


def deciding_pages(base: int, nbytes: int, item: int, edges: Iterable[int]) -> list[int]:
    """Page indices of a buffer of ``nbytes`` at ``base`` in ``item``-byte pages (the last
    one may be short) that decide, given the registration edges (addresses) on both nodes."""
    count = max(1, -(-nbytes // max(item, 1)))
    pages = {0, count - 1}
    for edge in edges:
        off = edge - base
        if 0 < off < nbytes:
            for p in (off // item - 1, off // item, (off - 1) // item):
                if 0 <= p < count:
                    pages.add(p)
    return sorted(pages)
