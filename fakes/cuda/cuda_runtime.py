"""One fake CUDA runtime instance: the semantics of every modelled API, as plain ints.

A process can hold several runtime instances (torch's bundled libcudart, cuda-bindings'
static one) over one driver (docs/cuda-runtime.md §6), so each face gets its own
``FakeRuntime`` while sharing a :class:`FakeDriver`. Methods return the error code (and
outputs); the faces turn those into torch or cuda-python objects. Every failure lands in
the calling thread's last-error slot of this instance only.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import errors as E
from .copies import CopyFault, HostSide, classify_copy_sides
from .cuda_driver import FLAG_BITS, REGISTER_MAPPED, FakeDriver
from .device_attributes import attribute_value
from .registry import Pinned

__all__ = ["FLAG_BITS", "FakeRuntime", "PointerAttributes"]

# cudaHostAlloc flags [DOC]: Default 0, Portable 1, Mapped 2, WriteCombined 4
HOST_ALLOC_FLAG_BITS = 0x7
MEMTYPE_UNREGISTERED, MEMTYPE_HOST, MEMTYPE_DEVICE = 0, 1, 2
STREAM_LEGACY, STREAM_PER_THREAD = 1, 2
U64 = 1 << 64
REAL_HOST_ALLOC_MAX = 64 << 20   # cudaHostAlloc below this returns real, writable memory


@dataclass(frozen=True)
class PointerAttributes:
    """``cudaPointerAttributes`` (docs/cuda-runtime.md §4)."""

    type: int
    device: int
    devicePointer: int
    hostPointer: int


class FakeRuntime:
    """A runtime instance bound to a driver; ``name`` says which library it stands for."""

    def __init__(self, driver: FakeDriver, name: str = "runtime",
                 version: int | None = None) -> None:
        self.driver = driver
        self.name = name
        # each instance reports the version of the library it stands for (docs/cuda-runtime.md §6,
        # §9)
        self.version = driver.profile.runtime_version if version is None else version
        self._tls = threading.local()
        self.last_copy_fault: CopyFault | None = None
        self._host_alloc_objects: dict[int, Any] = {}

    # -- error state (docs/cuda-runtime.md §6, §11.5) ----------------------------------------------
    def _fail(self, code: int) -> int:
        self._tls.last = code
        return code

    def _init_error(self) -> int:
        """35 / 100 / 34 in the no-driver, no-GPU and stub modes; a sticky error after."""
        env = self.driver.profile.env
        if env != "ok":
            code = {"no_driver": E.INSUFFICIENT_DRIVER, "no_gpu": E.NO_DEVICE,
                    "stub": E.STUB_LIBRARY}[env]
            self._tls.last = code
            return code
        return self.driver.sticky_error

    def _enter(self) -> int:
        """The gate of a call that needs a context: its first pass initialises the driver and the
        primary context for the whole process, as the runtime does on first use (CUDA Runtime API,
        "Interactions with the CUDA Driver API"), and makes the primary context current on the
        calling thread if it has none (docs/cuda-runtime.md §13.2); error and version queries do
        not enter."""
        code = self._init_error()
        if not self.driver.env_failing:
            self.driver.runtime_enter()
        return code

    def set_last_error(self, code: int) -> None:
        """Used by the fault injector so an injected failure leaves the same trace."""
        if code:
            self._tls.last = code

    def get_last_error(self) -> int:
        init = self._init_error()
        if init:
            return init
        code = getattr(self._tls, "last", 0)
        self._tls.last = 0
        return int(code)

    def peek_at_last_error(self) -> int:
        init = self._init_error()
        return init or int(getattr(self._tls, "last", 0))

    # -- versions and devices -------------------------------------------------------------
    def runtime_get_version(self) -> tuple[int, int]:
        return 0, self.version   # succeeds even without a driver (docs/cuda-runtime.md §2.2, §9)

    def driver_get_version(self) -> tuple[int, int]:
        # 0 without a driver (docs/cuda-runtime.md §2.2)
        return 0, self.driver.profile.driver_version

    def get_device_count(self) -> tuple[int, int | None]:
        init = self._enter()
        return (init, None) if init else (0, self.driver.profile.device_count)

    def get_device(self) -> tuple[int, int | None]:
        init = self._enter()
        return (init, None) if init else (0, self.driver.current_device())

    def set_device(self, device: int) -> int:
        init = self._enter()
        if init:
            return init
        if not 0 <= device < self.driver.profile.device_count:
            return self._fail(E.INVALID_DEVICE)
        self.driver.set_current_device(device)
        # CUDA 12.0+: cudaSetDevice initialises the device's primary context and makes it
        # current on the calling thread (docs/cuda-runtime.md §13.2) [DOC]
        contexts = self.driver.contexts
        contexts.runtime_uses(device)
        contexts.set_current(contexts.primary(device))
        return 0

    def device_get_attribute(self, attr: int, device: int) -> tuple[int, int | None]:
        """Every cudaDeviceAttr member answers from the profile's table (device_attributes)."""
        init = self._enter()
        if init:
            return init, None
        if not 0 <= device < self.driver.profile.device_count:
            return self._fail(E.INVALID_DEVICE), None
        value = attribute_value(self.driver.profile, attr)
        if value is None:           # reserved members and non-members -> 1 [INF]
            return self._fail(E.INVALID_VALUE), None
        return 0, value

    def mem_get_info(self, device: int = 0) -> tuple[int, int | None, int | None]:
        init = self._enter()
        if init:
            return init, None, None
        total = self.driver.profile.total_memory
        used = sum(a.size for a in self.driver.device_ranges())
        return 0, max(total - used, 0), total

    # -- cudaHostRegister / cudaHostUnregister (docs/cuda-runtime.md §2, §3) -----------------------
    def host_register(self, ptr: int, size: int, flags: int) -> int:
        driver = self.driver
        if driver.env_failing or driver.sticky_error:   # the hot path skips the method call
            return self._enter()
        driver.runtime_enter()
        code = driver.host_register(ptr, size, flags)
        if code:
            self._tls.last = code
        return code

    def host_unregister(self, ptr: int) -> int:
        driver = self.driver
        if driver.env_failing or driver.sticky_error:
            return self._enter()
        driver.runtime_enter()
        code = driver.host_unregister(ptr)
        if code:
            self._tls.last = code
        return code

    # -- cudaHostAlloc / cudaMallocHost / cudaFreeHost ---------------------------------
    def host_alloc(self, size: int, flags: int = 0) -> tuple[int, int | None]:
        init = self._enter()
        if init:
            return init, None
        if flags & ~HOST_ALLOC_FLAG_BITS:
            return self._fail(E.INVALID_VALUE), None
        if size == 0:
            return 0, 0
        driver = self.driver
        if size <= REAL_HOST_ALLOC_MAX:
            block = np.zeros(size, np.uint8)            # real, writable pinned-like memory
            ptr = driver.space.track(block, name=f"cudaHostAlloc({size})").base
            self._host_alloc_objects[ptr] = block
        else:
            ptr = driver.space.reserve(size, name=f"cudaHostAlloc({size})", kind="host_alloc")
        with driver.lock:
            seq = driver.seq = driver.seq + 1
            # Default flags still map on UVA systems (docs/cuda-runtime.md §2.1), and
            # cudaHostGetFlags reports DEVICEMAP implicitly (docs/cuda-runtime.md §4, lupine #437).
            driver.pinned.add(Pinned(ptr, size, flags | REGISTER_MAPPED, "host_alloc", 0, seq,
                                     driver.alias_for(ptr, size)))
        return 0, ptr

    def host_alloc_array(self, ptr: int) -> Any:
        """The numpy array behind a small cudaHostAlloc block (for tests that move data)."""
        return self._host_alloc_objects.get(ptr)

    def free_host(self, ptr: int) -> int:
        init = self._enter()
        if init:
            return init
        if ptr == 0:
            return 0
        driver = self.driver
        with driver.lock:
            entry = driver.pinned.get(ptr)
            if entry is None or entry.kind != "host_alloc":
                return self._fail(E.INVALID_VALUE)
            driver.pinned.remove(ptr)
        driver.space.forget(ptr)
        self._host_alloc_objects.pop(ptr, None)
        return 0

    # -- device memory -----------------------------------------------------------------
    def malloc(self, size: int) -> tuple[int, int | None]:
        init = self._enter()
        if init:
            return init, None
        if size == 0:
            return 0, 0
        _, free, _ = self.mem_get_info()
        if free is not None and size > free:
            return self._fail(E.MEMORY_ALLOCATION), None
        dev = self.driver.current_device()
        return 0, self.driver.device_alloc(size, dev).base

    def free(self, ptr: int) -> int:
        init = self._enter()
        if init:
            return init
        if ptr == 0:
            return 0
        if self.driver.device_free(ptr) is None:
            return self._fail(E.INVALID_VALUE)
        return 0

    # -- pointer queries (docs/cuda-runtime.md §4) -------------------------------------------------
    def pointer_get_attributes(self, ptr: int) -> tuple[int, PointerAttributes | None]:
        init = self._enter()
        if init:
            return init, None
        driver = self.driver
        dev_alloc = driver.device_owner(ptr)
        if dev_alloc is not None:
            return 0, PointerAttributes(MEMTYPE_DEVICE, dev_alloc.device, ptr, 0)
        entry = driver.pinned.containing(ptr)
        if entry is None:
            # since CUDA 11: success with type Unregistered, hostPointer set (docs/cuda-runtime.md
            # §4)
            return 0, PointerAttributes(MEMTYPE_UNREGISTERED,
                                        driver.profile.unregistered_pointer_device, 0, ptr)
        off = ptr - entry.base
        if driver.profile.pointer_attributes_interior == "base":
            off = 0
        return 0, PointerAttributes(MEMTYPE_HOST, entry.device, entry.alias + off,
                                    entry.base + off)

    def host_get_device_pointer(self, ptr: int, flags: int) -> tuple[int, int | None]:
        init = self._enter()
        if init:
            return init, None
        if flags != 0:                                   # docs/cuda-runtime.md §4: flags must be 0
            return self._fail(E.INVALID_VALUE), None
        entry = self.driver.pinned.containing(ptr)
        # docs/cuda-runtime.md §4: unregistered -> 1 [INF]
        if entry is None:
            return self._fail(E.INVALID_VALUE), None
        return 0, entry.alias + (ptr - entry.base)

    def host_get_flags(self, ptr: int) -> tuple[int, int | None]:
        init = self._enter()
        if init:
            return init, None
        entry = self.driver.pinned.containing(ptr)
        if entry is None:
            return self._fail(E.INVALID_VALUE), None
        if entry.kind == "register" and \
                self.driver.profile.host_get_flags_on_registered == "invalid":
            return self._fail(E.INVALID_VALUE), None     # docs/cuda-runtime.md §4 [UNC]
        return 0, entry.flags

    # -- streams --------------------------------------------------------------------------
    def stream_create(self) -> tuple[int, int | None]:
        init = self._enter()
        if init:
            return init, None
        d = self.driver
        handle = d._stream_next
        d._stream_next += 0x100
        d.streams.add(handle)
        return 0, handle

    def stream_destroy(self, stream: int) -> int:
        init = self._enter()
        if init:
            return init
        if stream not in self.driver.streams:
            return self._fail(E.INVALID_RESOURCE_HANDLE)
        self.driver.streams.discard(stream)
        return 0

    def synchronize(self, stream: int | None = None) -> int:
        """cudaStreamSynchronize / cudaDeviceSynchronize: where async errors surface."""
        init = self._enter()
        if init:
            return self._fail(init)
        if stream not in (None, 0, STREAM_LEGACY, STREAM_PER_THREAD) and \
                stream not in self.driver.streams:
            return self._fail(E.INVALID_RESOURCE_HANDLE)
        return 0

    def _stream_ok(self, stream: int) -> bool:
        return stream in (0, STREAM_LEGACY, STREAM_PER_THREAD) or stream in self.driver.streams

    # -- copies (docs/cuda-runtime.md §5) ----------------------------------------------------------
    def memcpy_async(self, dst: int, src: int, count: int, kind: int, stream: int) -> int:
        init = self._enter()
        if init:
            return init
        if kind not in (0, 1, 2, 3, 4):
            return self._fail(21)                        # cudaErrorInvalidMemcpyDirection
        if not self._stream_ok(stream):
            return self._fail(E.INVALID_RESOURCE_HANDLE)
        if count == 0:
            return 0
        fault = classify_copy_sides(self.driver, np.array([dst], np.uint64),
                                    np.array([src], np.uint64), np.array([count], np.int64),
                                    kind=kind, batch=False)
        self.last_copy_fault = fault
        return self._fail(fault.code) if fault is not None else 0

    def memcpy_batch_async(self, dsts: Sequence[int] | np.ndarray,
                           srcs: Sequence[int] | np.ndarray,
                           sizes: Sequence[int] | np.ndarray, count: int,
                           attrs_access_orders: Sequence[int], attrs_idxs: Sequence[int],
                           num_attrs: int, stream: int) -> tuple[int, int]:
        """The C-level rules of cudaMemcpyBatchAsync (docs/cuda-runtime.md §5.3); returns (code,
        failIdx)."""
        size_max = self.driver.profile.batch_fail_idx_unspecific
        init = self._enter()
        if init:
            return init, size_max
        p = self.driver.profile
        if p.driver_version < p.batch_min_driver:        # 12.8+ driver (docs/cuda-runtime.md §5.3)
            return self._fail(E.CALL_REQUIRES_NEWER_DRIVER), size_max
        self.last_copy_fault = None
        if count == 0 or num_attrs == 0 or num_attrs > count:
            return self._fail(E.INVALID_VALUE), size_max
        if stream in (0, STREAM_LEGACY):                  # legacy NULL stream rejected
            self.last_copy_fault = CopyFault(E.INVALID_VALUE, -1, "legacy NULL stream",
                                             HostSide.NONE, 0, 0, ())
            return self._fail(E.INVALID_VALUE), size_max
        if not self._stream_ok(stream):
            return self._fail(E.INVALID_RESOURCE_HANDLE), size_max
        idxs = [int(i) for i in attrs_idxs[:num_attrs]]
        if idxs[0] != 0 or any(b <= a for a, b in itertools.pairwise(idxs)) \
                or idxs[-1] >= count:
            return self._fail(E.INVALID_VALUE), size_max
        for order in attrs_access_orders[:num_attrs]:
            if int(order) not in (1, 2, 3):               # Invalid (0) is the default: rejected
                return self._fail(E.INVALID_VALUE), size_max
        d = np.asarray(dsts[:count], dtype=np.uint64)
        s = np.asarray(srcs[:count], dtype=np.uint64)
        n = np.asarray(sizes[:count], dtype=np.int64)
        bad = (n <= 0) | (d == 0) | (s == 0)              # zero-size / NULL entries (rmm #2509)
        if bad.any():
            i = int(np.argmax(bad))
            self.last_copy_fault = CopyFault(E.INVALID_VALUE, i, "zero-size or NULL entry",
                                             HostSide.NONE, 0, 0, ())
            return self._fail(E.INVALID_VALUE), i
        fault = classify_copy_sides(self.driver, d, s, n, kind=4, batch=True)
        self.last_copy_fault = fault
        if fault is None:
            return 0, size_max
        if fault.code == E.ILLEGAL_ADDRESS:
            # raw host VA on an alias != VA platform: the call succeeds, the DMA faults
            # later and the context is poisoned (sglang #40232) [OBS-ext]
            self.driver.sticky_error = E.ILLEGAL_ADDRESS
            return 0, size_max
        return self._fail(fault.code), size_max

    # -- reports ----------------------------------------------------------------------------
    def live(self) -> list[Pinned]:
        return self.driver.live_registrations()
