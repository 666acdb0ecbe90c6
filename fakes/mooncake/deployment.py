"""What a store client sees of its deployment: the object space of a master, and the fake.

``Cluster`` (the objects behind one master address) and ``StoredObject`` are plain data;
``Deployment`` is the part of :class:`~.fake.FakeMooncake` that sessions and store objects
use, so they depend on this protocol and the fake depends on them, never the reverse.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..verbs.fabric import Fabric
from .profiles import StoreProfile

__all__ = ["Cluster", "Deployment", "StoredObject"]


@dataclass
class StoredObject:
    """A stored value: its size, and its bytes (None when it was put from virtual memory)."""

    size: int
    data: bytes | None


@dataclass(eq=False)
class Cluster:
    """The objects behind one master address."""

    master: str
    objects: dict[str, StoredObject] = field(default_factory=dict)


class Deployment(Protocol):
    """The fake deployment a store object belongs to."""

    profile: StoreProfile
    fabric: Fabric
    stores: list[Any]

    def env(self) -> Mapping[str, str]: ...

    def cluster(self, master: str) -> Cluster: ...
