"""``allocate_managed_buffer`` / ``free_managed_buffer``: the binding's slab allocator (§8.6).

Sizes up to 256 MiB come from 16 classes of slabs (8 KiB ... 256 MiB); the first slab of any
class registers a 2 GiB buffer with the engine and splits it buddy-style; each class is a
stack, so the last freed slab is handed out first. Larger sizes get a buffer of their own,
registered, and are unregistered when freed. ``free_managed_buffer`` pushes whatever address
it is given onto its class's stack and returns 0 (the real one does not check it either).
The fake's 2 GiB buffers are reserved addresses: registration works, no byte moves (§8.7).
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["DEFAULT_BUFFER_CAPACITY", "SLAB_KB", "ManagedBuffers", "class_id"]

DEFAULT_BUFFER_CAPACITY = 2 << 30
SLAB_KB = (8, 16, 32, 64, 128, 256, 512, 1024, 2 << 10, 4 << 10, 8 << 10, 16 << 10,
           32 << 10, 64 << 10, 128 << 10, 256 << 10)
_MAX = len(SLAB_KB) - 1


def class_id(size: int) -> int:
    """The slab class for ``size`` bytes, -1 above the largest slab."""
    if size > 1024 * SLAB_KB[_MAX]:
        return -1
    for i in range(_MAX - 1, -1, -1):
        if size > 1024 * SLAB_KB[i]:
            return i + 1
    return 0


class ManagedBuffers:
    """The free lists and the raw buffers of one engine."""

    def __init__(self, raw: Callable[[int], int], release: Callable[[int], None]) -> None:
        self._raw = raw            # allocate + register, 0 on failure
        self._release = release    # unregister + free
        self.free: list[list[int]] = [[] for _ in SLAB_KB]
        self.large: set[int] = set()

    def _split(self, cid: int) -> bool:
        if cid == _MAX:
            base = self._raw(DEFAULT_BUFFER_CAPACITY)
            if not base:
                return False
            step = 1024 * SLAB_KB[_MAX]
            self.free[_MAX].extend(base + off for off in range(0, DEFAULT_BUFFER_CAPACITY, step))
            return True
        if not self.free[cid + 1] and not self._split(cid + 1):
            return False
        buf = self.free[cid + 1].pop()
        self.free[cid] += [buf, buf + SLAB_KB[cid] * 1024]
        return True

    def allocate(self, length: int) -> int:
        cid = class_id(length)
        if cid < 0:
            base = self._raw(length)
            if base:
                self.large.add(base)
            return base
        if not self.free[cid] and not self._split(cid):
            return 0
        return self.free[cid].pop()

    def release(self, addr: int, length: int) -> int:
        cid = class_id(length)
        if cid < 0:
            self.large.discard(addr)
            self._release(addr)
            return 0
        self.free[cid].append(addr)
        return 0
