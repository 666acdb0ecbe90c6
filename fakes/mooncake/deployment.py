"""What a store client sees of its deployment: the object space of a master, and the fake.

``Cluster`` (the objects behind one master address) and ``StoredObject`` are plain data;
``Deployment`` is the part of :class:`~.fake.FakeMooncake` that sessions and store objects
use, so they depend on this protocol and the fake depends on them, never the reverse.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..verbs.fabric import Fabric
from .profiles import StoreProfile

__all__ = ["Cluster", "Deployment", "StoredObject"]


@dataclass
class StoredObject:
    """A stored value: its size, its bytes (None when it was put from virtual memory), the
    client whose global segment holds it (None: another node's), and its read lease."""

    size: int
    data: bytes | None
    owner: object | None = None
    lease_until: float = 0.0


@dataclass(eq=False)
class Cluster:
    """The objects behind one master address.

    ``segments`` are the clients that mounted a global segment here; ``external_segments``
    says other nodes of the deployment (not modelled) mount segments too, so a put always
    finds space. ``clock`` (seconds) times the read leases.
    """

    master: str
    objects: dict[str, StoredObject] = field(default_factory=dict)
    segments: list[object] = field(default_factory=list)
    external_segments: bool = False
    clock: Callable[[], float] = time.monotonic

    def leased(self, obj: StoredObject) -> bool:
        return obj.lease_until > self.clock()

    def drop_segment(self, owner: object) -> None:
        """``owner``'s segment is unmounted: the objects in it are gone (§7)."""
        if owner in self.segments:
            self.segments.remove(owner)
        for key in [k for k, o in self.objects.items() if o.owner is owner]:
            del self.objects[key]


class Deployment(Protocol):
    """The fake deployment a store object belongs to."""

    profile: StoreProfile
    fabric: Fabric
    stores: list[Any]

    def env(self) -> Mapping[str, str]: ...

    def cluster(self, master: str) -> Cluster: ...
