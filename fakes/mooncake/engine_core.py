"""What one ``mooncake.engine.TransferEngine`` holds: its regions, transports and segment.

Three layers, as in the real engine (docs/mooncake-verbs.md §8.2): the engine's own region
map (``TransferEngineImpl``: zero length -1, overlap -7, and the batch checks of §8.3), the
transports it installed (each registers a buffer in its own way and publishes it), and the
published segment descriptor (``TransferMetadata``: a list of buffers in registration order;
unregister removes the first entry with that exact base, else -3). The layers can disagree,
as they do in the real engine: a batch unregister naming an unknown address removes the
others from the segment but leaves every region in the map (§8.3).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ..cuda.device_memory import GpuMemory
from ..verbs.errors import PyverbsRDMAError
from ..verbs.node import MrRecord, Nic
from .engine_dmabuf import reg_device_mr
from .errors import TeError
from .profiles import StoreProfile

__all__ = ["EngineCore", "RdmaTransport", "Segment", "SegmentBuffer", "TcpTransport",
           "Transport"]

INVALID = int(TeError.ERR_INVALID_ARGUMENT)
NOT_REGISTERED = int(TeError.ERR_ADDRESS_NOT_REGISTERED)
OVERLAPPED = int(TeError.ERR_ADDRESS_OVERLAPPED)
CONTEXT = int(TeError.ERR_CONTEXT)


class _ExportFailed(Exception):
    """The dma-buf export failed (a CUresult): the engine's -202 without an MR errno."""


@dataclass(eq=False)
class SegmentBuffer:
    """One published buffer (a ``BufferDesc``) and the MRs a transport made for it."""

    addr: int
    length: int
    transport: str
    mrs: list[MrRecord] = field(default_factory=list)

    def holds(self, addr: int, nbytes: int) -> bool:
        return self.addr <= addr and addr + nbytes <= self.addr + self.length

    def invalidated(self) -> bool:
        """Whether an MR of this buffer was invalidated under it (device memory released
        and mapped again, docs/gpu-rdma.md §7): the work requests through its keys fail."""
        return any(m.invalidated() for m in self.mrs)


@dataclass(eq=False)
class Segment:
    """A segment descriptor: its name and buffers in registration order (§8.2)."""

    name: str
    buffers: list[SegmentBuffer] = field(default_factory=list)

    def add(self, buf: SegmentBuffer) -> None:
        self.buffers.append(buf)

    def remove(self, addr: int, transport: str) -> SegmentBuffer | None:
        """The first entry of ``transport`` with this exact base, removed; None if none."""
        for i, buf in enumerate(self.buffers):
            if buf.addr == addr and buf.transport == transport:
                return self.buffers.pop(i)
        return None

    def holds(self, addr: int, nbytes: int) -> bool:
        """The tcp server's check: the whole range inside one published buffer (§8.4)."""
        return any(b.holds(addr, nbytes) for b in self.buffers)

    def usable(self, addr: int, nbytes: int) -> bool:
        """The rdma transport's check: the range inside one published buffer whose MRs
        still reach its memory (an invalidated MR fails the slice's work request: the
        responder's IBV_WC_REM_ACCESS_ERR or the requester's IBV_WC_LOC_PROT_ERR, and the
        engine reports the batch failed, docs/gpu-rdma.md §7) [INF]."""
        return any(b.holds(addr, nbytes) and not b.invalidated() for b in self.buffers)

    def snapshot(self) -> Segment:
        return Segment(self.name, list(self.buffers))

    def first_address(self) -> int:
        return self.buffers[0].addr if self.buffers else 0


class Transport(Protocol):
    """What the engine asks of an installed transport."""

    name: str

    def register(self, addr: int, length: int) -> int: ...

    def unregister(self, addr: int) -> int: ...


class TcpTransport:
    """tcp: registration only publishes the buffer; nothing can fail but a missing base."""

    name = "tcp"

    def __init__(self, segment: Segment) -> None:
        self.segment = segment

    def register(self, addr: int, length: int) -> int:
        self.segment.add(SegmentBuffer(addr, length, self.name))
        return 0

    def unregister(self, addr: int) -> int:
        return 0 if self.segment.remove(addr, self.name) is not None else NOT_REGISTERED


class RdmaTransport(TcpTransport):
    """rdma: one MR per device (rolled back when one fails: -202 ERR_CONTEXT, §8.2), then
    published with their keys; device memory through nvidia-peermem or a dma-buf (§8.9)."""

    name = "rdma"

    def __init__(self, segment: Segment, devices: Sequence[Nic], access: int, *,
                 gpu_registration: str = "peermem", dmabuf_export: str = "allocation") -> None:
        super().__init__(segment)
        self.devices = list(devices)
        self.access = access
        self._pd = {nic.name: nic.new_pd_id() for nic in self.devices}
        self.last_errno: int | None = None
        self.last_cuda_error: int | None = None
        self.gpu_registration = gpu_registration
        self.dmabuf_export = dmabuf_export

    def _reg_one(self, nic: Nic, addr: int, length: int) -> MrRecord | int:
        """One NIC's MR: ibv_reg_mr, or on the dma-buf path for device memory (§8.9)."""
        gpu = nic.node.gpu
        if self.gpu_registration == "dmabuf" and isinstance(gpu, GpuMemory) and \
                gpu.owns(addr):
            return reg_device_mr(nic, gpu, self._pd[nic.name], addr, length, self.access,
                                 self.dmabuf_export)
        return nic.reg_mr(addr, length, self.access, pd_id=self._pd[nic.name],
                          owner="mooncake.engine")

    def register(self, addr: int, length: int) -> int:
        made: list[MrRecord] = []
        try:
            for nic in self.devices:
                rec = self._reg_one(nic, addr, length)
                if isinstance(rec, int):
                    self.last_cuda_error = rec
                    raise _ExportFailed
                made.append(rec)
        except (PyverbsRDMAError, _ExportFailed) as exc:
            if isinstance(exc, PyverbsRDMAError):
                self.last_errno = exc.error_code
            for rec in reversed(made):
                rec.nic.release(rec)
            return CONTEXT
        self.segment.add(SegmentBuffer(addr, length, self.name, made))
        return 0

    def unregister(self, addr: int) -> int:
        buf = self.segment.remove(addr, self.name)
        if buf is None:
            return NOT_REGISTERED
        failed = False
        for rec in buf.mrs:
            try:
                rec.nic.dereg_mr(rec)
            except PyverbsRDMAError as exc:
                self.last_errno = exc.error_code
                failed = True
        return INVALID if failed else 0


class EngineCore:
    """``TransferEngineImpl``'s registration: the region map over the transports (§8.2-§8.3)."""

    def __init__(self, profile: StoreProfile, transports: Sequence[Transport]) -> None:
        self.profile = profile
        self.transports = list(transports)
        self.regions: dict[int, int] = {}
        self._bases: list[int] = []

    # -- the region map --------------------------------------------------------------------
    def overlaps(self, addr: int, length: int) -> bool:
        """Whether ``[addr, addr+length)`` meets a region (a zero length meets nothing)."""
        if length == 0:
            return False
        i = bisect.bisect_right(self._bases, addr)
        if i > 0:
            prev = self._bases[i - 1]
            if prev + self.regions[prev] > addr:
                return True
        return i < len(self._bases) and self._bases[i] < addr + length

    def _commit(self, addr: int, length: int) -> None:
        if addr not in self.regions:
            bisect.insort(self._bases, addr)
        self.regions[addr] = length

    def _erase(self, addr: int) -> None:
        if self.regions.pop(addr, None) is not None:
            del self._bases[bisect.bisect_left(self._bases, addr)]

    # -- one buffer ------------------------------------------------------------------------
    def register(self, addr: int, length: int) -> int:
        if length == 0:
            return INVALID
        if self.overlaps(addr, length):
            return OVERLAPPED
        attempted: list[Transport] = []
        for transport in self.transports:
            attempted.append(transport)
            rc = transport.register(addr, length)
            if rc < 0:
                if self.profile.engine_rolls_back_transports:   # #2965
                    for done in reversed(attempted):
                        done.unregister(addr)
                return rc
        self._commit(addr, length)
        return 0

    def unregister(self, addr: int) -> int:
        first = 0
        for transport in self.transports:
            rc = transport.unregister(addr)
            if rc and not self.profile.engine_rolls_back_transports:
                return rc                  # before #2965: the first failure stops the walk
            first = first or rc
        if first:
            return first
        self._erase(addr)
        return 0

    # -- batches ---------------------------------------------------------------------------
    def _batch_refusal(self, entries: Sequence[tuple[int, int]]) -> int:
        """The checks before any transport sees the batch (§8.3)."""
        if self.profile.engine_batch_validates:            # #2854
            ordered = sorted(entries)
            for i, (addr, length) in enumerate(ordered):
                if length == 0:
                    return INVALID
                if i and addr - ordered[i - 1][0] < ordered[i - 1][1]:
                    return OVERLAPPED
            # tryReserveMemoryRegions: against the map, and each entry against the earlier
            seen = EngineCore(self.profile, ())
            for addr, length in entries:
                if self.overlaps(addr, length) or seen.overlaps(addr, length):
                    return OVERLAPPED
                seen._commit(addr, length)
            return 0
        if any(self.overlaps(addr, length) for addr, length in entries):
            return OVERLAPPED
        return 0

    def register_batch(self, entries: Sequence[tuple[int, int]]) -> int:
        refused = self._batch_refusal(entries)
        if refused:
            return refused
        propagate = self.profile.engine_batch_propagates_errors      # #2869
        attempted: list[Transport] = []
        for transport in self.transports:
            attempted.append(transport)
            first = 0
            for addr, length in entries:
                rc = transport.register(addr, length)
                if rc and propagate:
                    first = rc
                    break
            if first:
                for done in reversed(attempted):
                    for addr, _ in entries:
                        done.unregister(addr)
                return first
        for addr, length in entries:
            self._commit(addr, length)
        return 0

    def unregister_batch(self, addrs: Sequence[int]) -> int:
        propagate = self.profile.engine_batch_propagates_errors
        first = 0
        for transport in self.transports:
            for addr in addrs:
                rc = transport.unregister(addr)
                if rc and propagate and not first:
                    first = rc
        if first:
            return first            # §8.3: every region stays in the map
        for addr in addrs:
            self._erase(addr)
        return 0

    def clear(self) -> list[int]:
        """Every region, unregistered (the engine is destroyed): the bases it held."""
        bases = list(self._bases)
        for addr in bases:
            for transport in self.transports:
                transport.unregister(addr)
        self.regions.clear()
        self._bases.clear()
        return bases
