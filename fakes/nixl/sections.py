"""How NIXL finds a descriptor among an agent's registrations (docs/nixl.md §4.1).

Registrations are kept per memory type (and backend) in a section sorted by (devID, addr,
len); a list of transfer descriptors is looked up by ``nixlMemSection::populate``
(src/infra/nixl_memory_section.cpp) over ``nixlSecDescList::getCoveringIndex`` and
``nixlBasicDesc::covers`` (src/infra/nixl_descriptors.cpp, src/api/cpp/nixl_descriptors.h).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence

__all__ = ["Range", "covered", "covering", "covers", "populate"]

Range = tuple[int, int, int]                 # (addr, len, devID)


def covers(reg: Range, query: Range) -> bool:
    """``nixlBasicDesc::covers``: same devID, and the query inside the registered range."""
    addr, length, dev = reg
    end = addr + length
    return dev == query[2] and addr <= query[0] <= end and query[1] <= end - query[0]


def covering(keyed: Sequence[tuple[int, int, int]], desc: Range) -> int:
    """``nixlSecDescList::getCoveringIndex`` over a section sorted by (devID, addr, len):
    the first entry not below the query, or the one before it, if it covers it; else -1."""
    addr, length, dev = desc
    i = bisect.bisect_left(keyed, (dev, addr, length))
    for j in (i, i - 1):
        if 0 <= j < len(keyed):
            d, a, n = keyed[j]
            if covers((a, n, d), desc):
                return j
    return -1


def populate(ranges: Sequence[Range], descs: Sequence[Range]) -> bool:
    """Whether every descriptor of a list is found in a section of registrations, as NIXL
    looks them up (``nixlMemSection::populate``, src/infra/nixl_memory_section.cpp): the
    first by :func:`covering`; each next one, if not below the one before, by walking on
    from the entry that held the one before; else by :func:`covering` again. A registration
    the walk or the search does not reach is not looked at, so with overlapping registrations
    a covered descriptor can be NOT_FOUND (and one a search would miss can be found by the
    walk); a descriptor never spans two registrations, even adjacent ones; an empty list is
    refused [verified in source; OBS-local by the differential, docs/nixl.md §4.1]."""
    if not descs:
        return False
    keyed = sorted((d, a, n) for a, n, d in ranges)
    at = covering(keyed, descs[0])
    if at < 0:
        return False
    for prev, desc in itertools.pairwise(descs):
        if (desc[2], desc[0], desc[1]) < (prev[2], prev[0], prev[1]):
            at = covering(keyed, desc)
            if at < 0:
                return False
            continue
        while at < len(keyed) and not covers((keyed[at][1], keyed[at][2], keyed[at][0]),
                                             desc):
            at += 1
        if at == len(keyed):
            return False
    return True


def covered(ranges: Sequence[Range], desc: Range) -> bool:
    """One descriptor found in a section (:func:`populate` of a one-element list)."""
    return populate(ranges, [desc])
