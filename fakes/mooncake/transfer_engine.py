"""The fake transfer engine: registrations as MRs on every device, and the slice rule.

``register`` follows §1.5: zero length and overlaps are refused (adjacent chunks are fine),
then each chunk becomes one MR on every opened device through the fake fabric, rolling back
the MRs already made if one fails. ``unregister`` needs the exact base (§1.5 step 5).
``transfer_ok`` decides whether a local range can be transferred: it is cut into store
slices (≤ kMaxSliceSize, §1.3) and those into TE slices (MC_SLICE_SIZE with the tail rule,
§1.7); under ``released`` every TE slice must lie inside one registered buffer (and one MR
on some device); under ``head`` slices are split at MR seams, so full coverage suffices.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from ..verbs.errors import PyverbsRDMAError
from ..verbs.node import MrRecord, Nic, Node
from .errors import TeError
from .profiles import StoreProfile

__all__ = ["BufferDesc", "FakeTransferEngine", "store_slices", "te_slices"]


@dataclass(eq=False)
class BufferDesc:
    """One published buffer: ``[addr, addr+length)`` and its MR on each device (§1.5)."""

    addr: int
    length: int
    mrs: list[MrRecord] = field(default_factory=list)

    @property
    def end(self) -> int:
        return self.addr + self.length

    def holds(self, addr: int, nbytes: int) -> bool:
        """selectDevice: the whole slice lies in this buffer and in its MR on some device."""
        if not (self.addr <= addr and addr + nbytes <= self.end):
            return False
        return not self.mrs or any(m.contains(addr, nbytes) for m in self.mrs)


@dataclass(eq=False)
class Registration:
    """What ``registerLocalMemory(base, len)`` made: one or more chunks (``chunk_map_``)."""

    base: int
    length: int
    chunks: list[BufferDesc]
    remote_accessible: bool


def te_slices(addr: int, length: int, profile: StoreProfile,
              slice_size: int | None = None) -> list[tuple[int, int]]:
    """§1.7: slices of MC_SLICE_SIZE from the request's start; the last absorbs a tail."""
    size = slice_size or profile.slice_size
    out: list[tuple[int, int]] = []
    off = 0
    while off < length:
        n = min(size, length - off)
        rest = length - off - n
        if rest > 0 and (rest <= profile.fragment_limit if profile.tail_absorb_inclusive
                         else rest < profile.fragment_limit):
            n += rest
        out.append((addr + off, n))
        off += n
    return out


def store_slices(addr: int, length: int, profile: StoreProfile) -> list[tuple[int, int]]:
    """§1.3: a user buffer is cut into slices of at most kMaxSliceSize bytes."""
    step = profile.max_slice_size
    return [(addr + off, min(step, length - off)) for off in range(0, length, step)]


class FakeTransferEngine:
    """One client's transfer engine: BufferDescs, chunk map, and the devices it opened."""

    def __init__(self, node: Node, devices: list[Nic], profile: StoreProfile,
                 max_mr_size: int, slice_size: int) -> None:
        self.node = node
        self.devices = devices
        self.profile = profile
        self.max_mr_size = max_mr_size
        self.slice_size = slice_size
        self._pd = {nic.name: nic.new_pd_id() for nic in devices}
        self._regs: dict[int, Registration] = {}
        self._bases: list[int] = []
        self._index: tuple[list[int], list[BufferDesc]] | None = None   # see _sorted_descs
        self.last_errno: int | None = None

    # -- registration ---------------------------------------------------------------------
    def registrations(self) -> list[Registration]:
        return [self._regs[b] for b in self._bases]

    def _overlaps(self, addr: int, length: int) -> bool:
        i = bisect.bisect_right(self._bases, addr)
        if i > 0:
            prev = self._regs[self._bases[i - 1]]
            if prev.base + prev.length > addr:
                return True
        return i < len(self._bases) and self._bases[i] < addr + length

    def _chunks(self, addr: int, length: int) -> list[tuple[int, int, int]]:
        """(addr, published length, MR length) per chunk."""
        limit = self.max_mr_size
        if self.profile.te_splits_mrs:
            return [(addr + off, min(limit, length - off), min(limit, length - off))
                    for off in range(0, length, limit)]
        # §1.6 released TE: a too-long MR is silently shrunk, the buffer still advertised
        # whole (reachable only by calling the engine directly: the store rejects first)
        return [(addr, length, min(length, limit))]

    def register(self, addr: int, length: int, access: int, *,
                 remote_accessible: bool = False) -> int:
        """``registerLocalMemory``: 0 or a negative TeError (§1.5 steps 3-4)."""
        if length == 0:
            return int(TeError.ERR_INVALID_ARGUMENT)
        if self._overlaps(addr, length):
            return int(TeError.ERR_ADDRESS_OVERLAPPED)
        made: list[MrRecord] = []
        chunks: list[BufferDesc] = []
        try:
            for caddr, clen, mrlen in self._chunks(addr, length):
                desc = BufferDesc(caddr, clen)
                for nic in self.devices:
                    rec = nic.reg_mr(caddr, mrlen, access, pd_id=self._pd[nic.name],
                                     owner="mooncake")
                    made.append(rec)
                    desc.mrs.append(rec)
                chunks.append(desc)
        except PyverbsRDMAError as exc:
            self.last_errno = exc.error_code
            for rec in reversed(made):      # roll back the chunks already registered
                rec.nic.release(rec)
            return int(TeError.ERR_INVALID_ARGUMENT)
        reg = Registration(addr, length, chunks, remote_accessible)
        bisect.insort(self._bases, addr)
        self._regs[addr] = reg
        self._index = None
        return 0

    def unregister(self, addr: int) -> int:
        """``unregisterLocalMemory``: the exact base, else ERR_ADDRESS_NOT_REGISTERED (-3).

        [inferred] an ``ibv_dereg_mr`` failure is reported (the store turns it into -600)
        after the metadata is dropped; the failed MR stays registered on the fabric.
        """
        reg = self._regs.pop(addr, None)
        if reg is None:
            return int(TeError.ERR_ADDRESS_NOT_REGISTERED)
        del self._bases[bisect.bisect_left(self._bases, addr)]   # a bisect, not a scan
        self._index = None
        failed = False
        for desc in reg.chunks:
            for rec in desc.mrs:
                try:
                    rec.nic.dereg_mr(rec)
                except PyverbsRDMAError as exc:
                    self.last_errno = exc.error_code
                    failed = True
        return int(TeError.ERR_INVALID_ARGUMENT) if failed else 0

    # -- data path ------------------------------------------------------------------------
    def _sorted_descs(self) -> tuple[list[int], list[BufferDesc]]:
        """Every published buffer by address, and their starts for bisect: built once per
        change of the registrations, so a transfer costs log(buffers), not buffers (a pool
        of thousands of MRs is moved page by page)."""
        if self._index is None:
            # registrations never overlap and their chunks are in order: already sorted
            descs = [d for b in self._bases for d in self._regs[b].chunks]
            self._index = ([d.addr for d in descs], descs)
        return self._index

    def published(self) -> list[BufferDesc]:
        """Every published buffer (one per registration, or per MR where the engine splits
        them), by address."""
        return self._sorted_descs()[1]

    def _covered(self, addr: int, length: int) -> bool:
        """Every byte lies in some buffer (HEAD splits slices at the seams)."""
        starts, descs = self._sorted_descs()
        pos, end = addr, addr + length
        i = max(bisect.bisect_right(starts, pos) - 1, 0)
        for desc in descs[i:]:
            if desc.end <= pos:
                continue
            if desc.addr > pos:
                return False
            if not desc.holds(pos, min(desc.end, end) - pos):
                return False
            pos = desc.end
            if pos >= end:
                return True
        return pos >= end

    def transfer_ok(self, addr: int, length: int) -> bool:
        """Whether a local range can be sent or received (§1.3, §1.7)."""
        if length == 0:
            return True
        if self.profile.slices_split_at_mr_seams:
            return self._covered(addr, length)
        starts, descs = self._sorted_descs()
        # the whole range inside one buffer and one of its MRs: so is every slice of it
        # (a page moved per call is one bisect, not one per slice)
        i = bisect.bisect_right(starts, addr) - 1
        if i >= 0 and descs[i].holds(addr, length):
            return True
        for saddr, slen in store_slices(addr, length, self.profile):
            for taddr, tlen in te_slices(saddr, slen, self.profile, self.slice_size):
                i = bisect.bisect_right(starts, taddr) - 1   # buffers never overlap
                if i < 0 or not descs[i].holds(taddr, tlen):
                    return False
        return True
