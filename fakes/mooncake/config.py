"""Module-level extras of ``mooncake.store``: ReplicateConfig, the host allocator (§1.2)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    from ..verbs.node import Node

__all__ = ["MooncakeHostMemAllocator", "ReplicateConfig", "bind_allocator", "bind_to_numa_node"]


class ReplicateConfig:
    """Per-put replication options; ``prefer_alloc_in_same_node`` makes puts fail (§1.3)."""

    def __init__(self) -> None:
        self.replica_num = 1
        self.with_soft_pin = False
        self.with_hard_pin = False
        self.preferred_segment = ""
        self.preferred_segments: list[str] = []
        self.prefer_alloc_in_same_node = False
        self.group_ids: list[int] = []

    def __repr__(self) -> str:
        return (f"ReplicateConfig(replica_num={self.replica_num}, "
                f"prefer_alloc_in_same_node={self.prefer_alloc_in_same_node})")


class MooncakeHostMemAllocator:
    """``alloc(size) -> int`` / ``free(ptr)``: host memory on the fake node.

    Small allocations are real (and tracked, so traces name them); big ones are virtual.
    """

    _node: ClassVar[Node | None] = None

    def __init__(self) -> None:
        if type(self)._node is None:
            raise RuntimeError("this allocator belongs to no fake node; use "
                               "FakeMooncake.patch() or fake.allocator_class")

    def alloc(self, size: int) -> int:
        node = type(self)._node
        assert node is not None
        return node.alloc(int(size)) if size > 0 else 0

    def free(self, ptr: int) -> int:
        node = type(self)._node
        assert node is not None
        node.free(int(ptr))
        return 0


def bind_allocator(node: Node) -> type[MooncakeHostMemAllocator]:
    return type("MooncakeHostMemAllocator", (MooncakeHostMemAllocator,),
                {"_node": node, "__module__": "mooncake.store"})


def bind_to_numa_node(node: Any) -> int:
    """NUMA binding has no effect on the fake."""
    return 0
