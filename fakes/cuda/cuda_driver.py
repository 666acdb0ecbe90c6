"""The fake driver: state shared by every runtime instance in one simulated process.

Registrations are driver-level (docs/cuda-runtime.md §6): a range pinned through torch's
runtime is pinned for cuda-python's too. The driver holds the pinned ranges, device
allocations, streams and the profile; per-thread last-error slots live in each
:class:`~kvreg.fakes.cuda.cuda_runtime.FakeRuntime`.
"""

from __future__ import annotations

import bisect
import itertools
import threading
from dataclasses import dataclass
from threading import get_ident

from ..address_space import AddressSpace, Allocation
from . import errors as E
from .host_mapping import range_is_mapped, virtual_extent
from .profile import DeviceProfile, get_profile
from .registry import Pinned, PinnedRegistry
from .vmm import VmmState

__all__ = ["ALIAS_OFFSET", "DEVICE_BASE", "FLAG_BITS", "PRIMARY_CONTEXT_BASE", "VMM_BASE",
           "ContextState", "DeviceAlloc", "FakeDriver"]

# cudaHostRegister / cuMemHostRegister flags (docs/cuda-runtime.md §2.1, driver_types.h 92-96) [DOC]
REGISTER_DEFAULT, REGISTER_PORTABLE, REGISTER_MAPPED, REGISTER_IO_MEMORY, REGISTER_READ_ONLY = (
    0, 1, 2, 4, 8)
FLAG_BITS = 0xF

_new_tuple = tuple.__new__

DEVICE_BASE = 3 << 60    # fake device pointers: non-canonical, apart from host virtual memory
ALIAS_OFFSET = 2 << 60   # device aliases of host memory, when alias != host VA
VMM_BASE = DEVICE_BASE + (1 << 59)   # cuMemAddressReserve ranges, apart from cudaMalloc's


# CUcontext handles of the primary contexts: device d's is PRIMARY_CONTEXT_BASE + d * 0x1000
PRIMARY_CONTEXT_BASE = 0x5C0_0000_0000


class ContextState:
    """The driver's contexts (docs/cuda-runtime.md §13): one primary context per device with
    its retain count, and a context stack per host thread, whose top is the thread's current
    context. A thread starts with an empty stack: driver calls that need a context then give
    CUDA_ERROR_INVALID_CONTEXT (201) [DOC: cuda.h]. Shared by the fakes of one process when
    its state is carried (kvreg.fakes.doors.ProcessState)."""

    def __init__(self) -> None:
        self._tls = threading.local()
        self.retained: dict[int, int] = {}     # device -> primary context retain count
        self.runtime_holds: set[int] = set()   # devices whose primary context the runtime uses
        self.lock = threading.Lock()

    @staticmethod
    def primary(device: int) -> int:
        return PRIMARY_CONTEXT_BASE + device * 0x1000

    @staticmethod
    def device_of(ctx: int) -> int | None:
        """The device of a primary context handle, None for any other value."""
        offset = ctx - PRIMARY_CONTEXT_BASE
        return offset // 0x1000 if offset >= 0 and offset % 0x1000 == 0 else None

    def stack(self) -> list[int]:
        try:
            return self._tls.stack  # type: ignore[no-any-return]
        except AttributeError:
            stack: list[int] = []
            self._tls.stack = stack
            return stack

    def current(self) -> int:
        """The calling thread's current context; 0 (NULL) when it has none."""
        stack = self.stack()
        return stack[-1] if stack else 0

    def set_current(self, ctx: int) -> None:
        """cuCtxSetCurrent: replace the top of the stack; NULL pops it (no-op when empty)."""
        stack = self.stack()
        if ctx:
            if stack:
                stack[-1] = ctx
            else:
                stack.append(ctx)
        elif stack:
            stack.pop()

    def clear_thread(self) -> None:
        self.stack().clear()

    def retain(self, device: int) -> int:
        with self.lock:
            self.retained[device] = self.retained.get(device, 0) + 1
        return self.primary(device)

    def release(self, device: int) -> bool:
        """False when the device's primary context holds no retain to release."""
        with self.lock:
            count = self.retained.get(device, 0)
            if count <= 0:
                return False
            self.retained[device] = count - 1
            return True

    def runtime_uses(self, device: int) -> None:
        """The runtime's first call on ``device`` needing a context: it retains the primary
        context (once per process) and makes it current on the calling thread when that
        thread has none (CUDA Runtime API, "Context Management") [DOC]."""
        if device not in self.runtime_holds:
            with self.lock:
                if device not in self.runtime_holds:
                    self.runtime_holds.add(device)
                    self.retained[device] = self.retained.get(device, 0) + 1
        stack = self.stack()
        if not stack:
            stack.append(self.primary(device))


@dataclass(frozen=True, slots=True)
class DeviceAlloc:
    base: int
    size: int
    device: int
    buffer_id: int = 0   # CU_POINTER_ATTRIBUTE_BUFFER_ID: unique, never reused [DOC]

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
        # buffer ids of every allocation API (cudaMalloc blocks, cuMemCreate handles) [DOC]
        self.buffer_ids = itertools.count(1)
        # cuMemCreate / cuMemAddressReserve / cuMemMap (docs/cuda-runtime.md §14.2)
        self.vmm = VmmState(VMM_BASE, self.profile.vmm_granularity, self.buffer_ids)
        # BAR1 bytes GPUDirect RDMA (nvidia-peermem) holds pinned, per device (§14.4)
        self.bar1_used: dict[int, int] = {}
        self.streams: set[int] = set()
        self._stream_next = 0x5000
        # a sticky error (e.g. 700 after an illegal DMA) poisons every later call
        self.sticky_error = 0
        # cuInit done, or a runtime call that needs a context passed its gate: per process, so
        # every runtime instance and the driver face see it (docs/cuda-runtime.md §6)
        self.initialised = False
        # primary contexts and each thread's current context (docs/cuda-runtime.md §13)
        self.contexts = ContextState()
        # aliases of registrations whose alias != VA: base -> alias
        self._alias_next = ALIAS_OFFSET
        self._mapped_hint = (0, 0, -1)

    # -- device (cudaMalloc) memory -------------------------------------------------------
    def device_alloc(self, size: int, device: int) -> DeviceAlloc:
        # docs/cuda-runtime.md §14.1: at least 256 B aligned [DOC]; the profile's alignment
        # (2 MiB, the allocator's granularity [OBS-ext]); blocks never touch
        align = self.profile.malloc_alignment
        base = (self._dev_next + align - 1) // align * align
        self._dev_next = base + max(size, 1) + (2 << 20)
        alloc = DeviceAlloc(base, size, device, next(self.buffer_ids))
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

    def runtime_enter(self) -> None:
        """A runtime call that needs a context passed its gate: the driver is initialised for
        the process, and the calling thread gets the primary context of its device as current
        when it has none (docs/cuda-runtime.md §13.2)."""
        self.initialised = True
        if not getattr(self.contexts._tls, "stack", None):
            self.contexts.runtime_uses(self.current_device())

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
        """Device alias of a new pinned range (docs/cuda-runtime.md §4: == VA when attribute 91 is
        set)."""
        if self.profile.can_use_host_pointer_for_registered_mem:
            return base
        alias = self._alias_next
        # adjacent registrations get non-adjacent aliases (sglang PR #37596) [OBS-ext]
        self._alias_next = (alias + size + (4 << 20) + 0xFFFF) & ~0xFFFF
        return alias

    def host_register(self, ptr: int, size: int, flags: int) -> int:
        """cudaHostRegister / cuMemHostRegister at driver level: a code, no error state."""
        driver = self
        p = driver.profile
        # docs/cuda-runtime.md §2.2 rows size 0 / NULL -> 1
        if ptr == 0 or size == 0:
            return E.INVALID_VALUE
        if flags:
            # docs/cuda-runtime.md §2.1 invalid bits -> 1
            if flags & ~FLAG_BITS:
                return E.INVALID_VALUE
            # docs/cuda-runtime.md §2.1 -> 801
            if flags & REGISTER_READ_ONLY and not p.read_only_supported:
                return E.NOT_SUPPORTED
            # docs/cuda-runtime.md §2.1 -> 800
            if flags & REGISTER_IO_MEMORY and not p.io_memory_permitted:
                return E.NOT_PERMITTED
        if not p.host_register_supported:               # docs/cuda-runtime.md §2.1 attribute 99
            return E.NOT_SUPPORTED
        lo, hi, gen = self._mapped_hint   # the last virtual buffer found mapped
        if not (lo <= ptr and ptr + size <= hi and gen == self.space.generation):
            if not range_is_mapped(self.space, ptr, size, p.reserved_va):
                # docs/cuda-runtime.md §2.2 rows "range not fully mapped", "address inside CUDA's
                # reserved
                # VA" and "device memory" -> 1 [OBS-ext]
                return E.INVALID_VALUE
            extent = virtual_extent(self.space, ptr) if self.space.is_virtual(ptr) else None
            if extent is not None:
                self._mapped_hint = (*extent, self.space.generation)
        lock = driver.lock
        lock.acquire()   # acquire/release in try/finally: half the cost of a with block
        try:
            hit = driver.pinned.first_overlap(ptr, size, p.overlap_granularity)
            if hit is not None:                         # docs/cuda-runtime.md §2.2 overlap -> 712
                code = p.register_host_alloc_code if hit.kind == "host_alloc" else \
                    E.HOST_MEMORY_ALREADY_REGISTERED
                return code
            if p.per_call_limit is not None and size >= p.per_call_limit:
                return E.MEMORY_ALLOCATION  # docs/cuda-runtime.md §2.2: 512 GiB per call, R580+
            seq = driver.seq = driver.seq + 1
            # current_device() and alias_for() inlined: this is the hot path
            dev = driver._thread_device.get(get_ident(), 0)
            alias = ptr if p.can_use_host_pointer_for_registered_mem else \
                driver.alias_for(ptr, size)
            # tuple.__new__ skips the NamedTuple's Python-level __new__ (same object)
            driver.pinned.add(_new_tuple(Pinned, (ptr, size, flags, "register", dev, seq, alias)))
        finally:
            lock.release()
        return 0

    def host_unregister(self, ptr: int) -> int:
        """cudaHostUnregister / cuMemHostUnregister at driver level (docs/cuda-runtime.md §3)."""
        driver = self
        lock = driver.lock
        lock.acquire()   # as in host_register
        try:
            if driver.pinned.remove_registered(ptr) is not None:
                return 0                                # docs/cuda-runtime.md §3: exact base -> 0
            entry = driver.pinned.get(ptr)
            if ptr == 0:
                return driver.profile.unregister_null_code   # docs/cuda-runtime.md §3 [UNC]
            inner = entry or driver.pinned.containing(ptr)
            if inner is not None:
                # docs/cuda-runtime.md §3: interior pointer -> 1; cudaHostAlloc memory -> 1 [OBS-
                # ext]
                return E.INVALID_VALUE
        finally:
            lock.release()
        return E.HOST_MEMORY_NOT_REGISTERED  # docs/cuda-runtime.md §3: unknown / twice -> 713

    def live_registrations(self) -> list[Pinned]:
        return [p for p in self.pinned if p.kind == "register"]
