"""A hybrid group of host pools (HostPoolGroup): a KV anchor plus side pools.

Each member allocates and registers its own buffers with its own G; the group only lists them
together and concatenates their page meta (docs/pools.md §2.9; docs/mooncake-verbs.md §3.4
_batch_io_v2).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Self

import numpy.typing as npt

from ._checks import GeometryError
from .base import BufferSpec, ExtentFamily, PageExtents, PoolGeometry

__all__ = ["HostPoolGroup"]


class HostPoolGroup(PoolGeometry):
    """Members in entry order (anchor first); roles name them ("kv", "indexer", "mamba", ...).

    buffers() are the members' buffers in order, renamed "<role>/<name>"; page_extents() are the
    members' extents in order with buffer indices offset by the buffers of earlier members.
    Layout, page size and page count are the anchor's (side pools take S, N and layout from it).
    """

    pool_type = "group"

    def __init__(self, members: Sequence[PoolGeometry], roles: Sequence[str] | None = None) -> None:
        if isinstance(members, PoolGeometry) or not members:
            raise GeometryError("members must be a non-empty list of pool geometries")
        for i, member in enumerate(members):
            if not isinstance(member, PoolGeometry):
                raise GeometryError(f"members[{i}] must be a pool geometry, got {member!r}")
        self.members: tuple[PoolGeometry, ...] = tuple(members)
        self.roles = self._roles(roles)
        anchor = self.members[0]
        self.layout = anchor.layout
        self.page_size = anchor.page_size
        buffers: list[BufferSpec] = []
        self.buffer_offsets: tuple[int, ...] = ()
        for role, member in zip(self.roles, self.members, strict=True):
            self.buffer_offsets += (len(buffers),)
            buffers += [replace(buf, name=f"{role}/{buf.name}") for buf in member.buffers()]
        self._buffers = tuple(buffers)

    def _roles(self, roles: Sequence[str] | None) -> tuple[str, ...]:
        if roles is None:
            counts = Counter(m.pool_type for m in self.members)
            seen: Counter[str] = Counter()
            names = []
            for member in self.members:
                kind = member.pool_type
                names.append(kind if counts[kind] == 1 else f"{kind}_{seen[kind]}")
                seen[kind] += 1
            return tuple(names)
        if isinstance(roles, str) or len(roles) != len(self.members):
            raise GeometryError(f"roles must name each of the {len(self.members)} members")
        if not all(isinstance(r, str) and r for r in roles) or len(set(roles)) != len(roles):
            raise GeometryError(f"roles must be unique non-empty strings, got {list(roles)!r}")
        return tuple(roles)

    @classmethod
    def from_size(cls, size: int, page_size: int, dcp_size: int = 1, **params: Any) -> Self:
        """Not available: size each member, then group them."""
        raise GeometryError("size: build the members with from_size, then group them")

    @property
    def page_count(self) -> int:
        return self.members[0].page_count

    @property
    def has_page_meta(self) -> bool:
        return all(m.has_page_meta for m in self.members)

    def buffers(self) -> tuple[BufferSpec, ...]:
        return self._buffers

    def params(self) -> dict[str, Any]:
        return {
            "members": [{"pool_type": m.pool_type, **m.params()} for m in self.members],
            "roles": list(self.roles),
        }

    def derived(self) -> dict[str, Any]:
        return {"buffer_offsets": list(self.buffer_offsets)}

    def page_extents(self, pages: npt.ArrayLike | None = None) -> PageExtents:
        """Each member's extents for the same pages (all of each member's pages when None); a
        member without page meta raises, as upstream get_page_buffer_meta would."""
        return PageExtents.concat(
            [
                member.page_extents(pages).shifted(offset)
                for member, offset in zip(self.members, self.buffer_offsets, strict=True)
            ]
        )

    def extent_families(self) -> tuple[ExtentFamily, ...]:
        """Each member's families, buffers and rows moved past the earlier members'."""
        out: list[ExtentFamily] = []
        rows = 0
        for member, offset in zip(self.members, self.buffer_offsets, strict=True):
            fams = member.extent_families()
            out += [f.shifted(offset, rows) for f in fams]
            rows += sum(f.count for f in fams)
        return tuple(out)
