"""The fake driver: state shared by every runtime instance in one simulated process.

Registrations are driver-level (spec/cuda-runtime.md §6): a range pinned through torch's
runtime is pinned for cuda-python's too. The driver holds the pinned ranges, device
allocations, streams and the profile; per-thread last-error slots live in each
:class:`~kvreg.fakes.cuda_runtime.FakeRuntime`.
"""

from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass

from .address_space import AddressSpace, Allocation
from .profile import DeviceProfile, get_profile
from .registry import Pinned, PinnedRegistry

__all__ = ["ALIAS_OFFSET", "DEVICE_BASE", "DeviceAlloc", "FakeDriver"]

DEVICE_BASE = 3 << 60    # fake device pointers: non-canonical, apart from host virtual memory
ALIAS_OFFSET = 2 << 60   # device aliases of host memory, when alias != host VA


@dataclass(frozen=True, slots=True)
class DeviceAlloc:
    base: int
    size: int
    device: int

    @property
    def end(self) -> int:
        return self.base + self.size


class FakeDriver:
    """Driver-level state; thread-safe through one lock, as the real driver serialises."""

    def __init__(self, profile: str | DeviceProfile | None = None,
                 space: AddressSpace | None = None) -> None:
        self.profile = get_profile(profile)
        self.env_failing = self.profile.env != "ok"   # no driver / no GPU / stub
        self.space = space if space is not None else AddressSpace()
        self.pinned = PinnedRegistry()
        self.lock = threading.RLock()
        self.seq = 0
        # cudaSetDevice is per host thread; a dict by thread id is cheaper than
        # threading.local on the register hot path
        self._thread_device: dict[int, int] = {}
        self._dev_bases: list[int] = []
        self._dev: dict[int, DeviceAlloc] = {}
        self._dev_next = DEVICE_BASE
        self.streams: set[int] = set()
        self._stream_next = 0x5000
        # a sticky error (e.g. 700 after an illegal DMA) poisons every later call
        self.sticky_error = 0
        # aliases of registrations whose alias != VA: base -> alias
        self._alias_next = ALIAS_OFFSET

    # -- device (cudaMalloc) memory -------------------------------------------------------
    def device_alloc(self, size: int, device: int) -> DeviceAlloc:
        base = (self._dev_next + 0xFFFF) & ~0xFFFF  # 64 KiB aligned, like cudaMalloc
        self._dev_next = base + max(size, 1) + (2 << 20)
        alloc = DeviceAlloc(base, size, device)
        bisect.insort(self._dev_bases, base)
        self._dev[base] = alloc
        self.space.add(Allocation(base, size, f"device{device}@{base:#x}", "device"))
        return alloc

    def device_free(self, base: int) -> DeviceAlloc | None:
        alloc = self._dev.pop(base, None)
        if alloc is not None:
            del self._dev_bases[bisect.bisect_left(self._dev_bases, base)]
            self.space.forget(base)
        return alloc

    def current_device(self) -> int:
        return self._thread_device.get(threading.get_ident(), 0)

    def set_current_device(self, device: int) -> None:
        self._thread_device[threading.get_ident()] = device

    @property
    def has_device_memory(self) -> bool:
        return bool(self._dev_bases)

    def device_owner(self, ptr: int) -> DeviceAlloc | None:
        i = bisect.bisect_right(self._dev_bases, ptr) - 1
        if i < 0:
            return None
        alloc = self._dev[self._dev_bases[i]]
        return alloc if ptr < alloc.end else None

    def device_ranges(self) -> list[DeviceAlloc]:
        return [self._dev[b] for b in self._dev_bases]

    # -- pinned host memory ---------------------------------------------------------------
    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def alias_for(self, base: int, size: int) -> int:
        """Device alias of a new pinned range (spec §4: == VA when attribute 91 is set)."""
        if self.profile.can_use_host_pointer_for_registered_mem:
            return base
        alias = self._alias_next
        # adjacent registrations get non-adjacent aliases (sglang PR #37596) [OBS-ext]
        self._alias_next = (alias + size + (4 << 20) + 0xFFFF) & ~0xFFFF
        return alias

    def live_registrations(self) -> list[Pinned]:
        return [p for p in self.pinned if p.kind == "register"]
