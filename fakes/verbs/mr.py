"""``pyverbs.mr.MR``: memory registration as pyverbs exposes it (docs/mooncake-verbs.md §4.4).

``MR(pd, length, access, address=None)`` registers user memory at ``address`` (pyverbs
treats ``address=0`` as "not given"), or a zeroed, page-aligned buffer pyverbs allocates
itself (real, zeroed memory up to 256 MiB; above that a virtual buffer, whose bytes
``read``/``write`` refuse). The errno rules are :meth:`~kvreg.fakes.verbs.fabric.Nic.reg_mr`'s
(§5.2).
``close()`` deregisters (a second close does nothing, as in pyverbs); an MR dropped without
``close()`` is deregistered when it is garbage-collected, as pyverbs' ``__dealloc__`` does.
"""

from __future__ import annotations

import ctypes
import weakref
from typing import Any

from . import enums as V
from .cints import SIZE_MAX, c_int, c_size_t, c_uint
from .errors import NotModelledError, PyverbsRDMAError, PyverbsUserError, StandIns
from .memory import classify
from .node import FabricLike, MrRecord, Nic, Node
from .pd import PD
from .strings import rereg_error_to_str

__all__ = ["MR", "c_int", "c_size_t", "c_uint"]

def _gc_release(nic: Nic, rec: MrRecord, node: Node, owned: int | None) -> None:
    """pyverbs deregisters an MR when the object dies without close()."""
    if rec.live:
        nic.release(rec)
        nic.node.fabric.trace.append(nic.face, "dereg_mr", (rec.addr, rec.length, rec.lkey),
                                     0, "garbage-collected", False)
    if owned is not None:
        node.free(owned)


class MR(StandIns):
    """A registered memory region with ``buf``, ``lkey``, ``rkey``, ``length`` (§4.4)."""

    NOT_MODELLED_ATTRS = frozenset({"unimport"})

    def __init__(self, creator: PD, length: int = 0, access: int = 0,
                 address: int | None = None, implicit: bool = False,
                 handle: int | None = None, **kwargs: Any) -> None:
        self._closed = True
        if handle is not None or kwargs:
            raise NotModelledError("kvreg's fake pyverbs models MR(pd, length, access, "
                                   "address=None, implicit=False) only")
        if not isinstance(creator, PD):
            raise PyverbsUserError(f"MR needs a PD, got {type(creator).__name__}")
        length = c_size_t(length, "length")
        access = c_uint(access, "access")
        self._pd = creator
        self._nic = creator.nic
        node = self._nic.node
        owned: int | None = None
        if implicit:
            # §4.4: implicit ODP registers NULL / SIZE_MAX with ON_DEMAND
            addr, length = 0, SIZE_MAX
            access |= int(V.ibv_access_flags.IBV_ACCESS_ON_DEMAND)
        elif address:
            addr = c_size_t(address, "address")
        elif length > 0:
            owned = addr = node.alloc(length)
        else:
            addr = 0  # ibv_reg_mr(pd, NULL, 0, ...): EINVAL below
        try:
            rec = self._nic.reg_mr(addr, length, access, pd_id=creator.pd_id)
        except BaseException:
            if owned is not None:
                node.free(owned)
            raise
        self._rec = rec
        self._owned = owned
        self._closed = False
        creator.add_ref(self)
        self._finalizer = weakref.finalize(self, _gc_release, self._nic, rec, node, owned)

    # -- properties ---------------------------------------------------------------------
    @property
    def buf(self) -> int:
        return self._rec.addr

    @property
    def lkey(self) -> int:
        return self._rec.lkey

    @property
    def rkey(self) -> int:
        return self._rec.rkey

    @property
    def length(self) -> int:
        return self._rec.length

    @property
    def handle(self) -> int:
        return self._rec.lkey

    @property
    def access(self) -> int:
        """The access flags the device kept (optional bits may be masked, §4.6)."""
        return self._rec.access

    @property
    def pd(self) -> PD:
        return self._pd

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def fabric(self) -> FabricLike:
        return self._nic.node.fabric

    # -- data ---------------------------------------------------------------------------
    def _range(self, offset: int, length: int, what: str) -> int:
        if self._closed:
            raise PyverbsUserError(f"{what}: the MR is closed")
        if length < 0 or offset < 0 or offset + length > self._rec.length:
            raise PyverbsUserError(f"{what}: [{offset}, {offset + length}) is outside the MR "
                                   f"of {self._rec.length} bytes")
        ptr = self._rec.addr + offset
        kind = classify(self._nic.node.space, ptr, length, write=what == "write")
        if kind not in ("real", "process"):
            raise TypeError(f"{what}: the MR's memory at {ptr:#x} is {kind}; the fake has no "
                            "bytes there")
        return ptr

    def write(self, data: str | bytes, length: int, offset: int = 0) -> None:
        """Copy ``length`` bytes of ``data`` into the MR at ``offset`` (a C int, §4.4)."""
        offset = c_int(offset, "offset")
        raw = data.encode() if isinstance(data, str) else bytes(data)
        length = c_size_t(length, "length")
        if length > len(raw):
            raise PyverbsUserError(f"write: length {length} exceeds the data ({len(raw)} "
                                   "bytes)")
        ptr = self._range(offset, length, "write")
        ctypes.memmove(ptr, raw, length)

    def read(self, length: int, offset: int) -> bytes:
        """``length`` bytes at ``offset``; offsets of 2 GiB and more overflow (§4.4)."""
        offset = c_int(offset, "offset")
        length = c_size_t(length, "length")
        ptr = self._range(offset, length, "read")
        return ctypes.string_at(ptr, length)

    def rereg(self, flags: int, pd: PD | None, addr: int, length: int, access: int) -> None:
        """``ibv_rereg_mr``: change the translation (addr, length), the PD and/or the
        access of a live MR, keeping its keys. libibverbs' own input checks (verbs.c
        ``ibv_rereg_mr``) give IBV_REREG_MR_ERR_INPUT; a kernel refusal (the checks of
        ``ibv_reg_mr`` on the new values, §5.2) gives IBV_REREG_MR_ERR_CMD. Either way
        the MR is unchanged and PyverbsRDMAError names the error."""
        flags = c_uint(flags, "flags")
        rc = self._rereg(flags, pd, addr, length, access)
        if rc:
            raise PyverbsRDMAError(f"Failed to rereg MR: {rereg_error_to_str(rc)}")

    def _rereg(self, flags: int, pd: PD | None, addr: int, length: int, access: int) -> int:
        E = V.ENUMS["ibv_rereg_mr_err_code"]
        R = V.ENUMS["ibv_rereg_mr_flags"]
        err_input = int(E.IBV_REREG_MR_ERR_INPUT)
        if self._closed or not flags or flags & ~int(R.IBV_REREG_MR_FLAGS_SUPPORTED):
            return err_input
        translate = bool(flags & R.IBV_REREG_MR_CHANGE_TRANSLATION)
        if translate and (not addr or not length):
            return err_input
        if flags & R.IBV_REREG_MR_CHANGE_PD and not isinstance(pd, PD):
            return err_input
        rec = self._rec
        new_addr, new_len = (c_size_t(addr, "addr"), c_size_t(length, "length")) \
            if translate else (rec.addr, rec.length)
        new_access = c_uint(access, "access") if flags & R.IBV_REREG_MR_CHANGE_ACCESS \
            else rec.access
        new_pd = pd if flags & R.IBV_REREG_MR_CHANGE_PD and isinstance(pd, PD) else self._pd
        if new_pd.nic is not self._nic:
            return err_input
        if self._nic.rereg_mr(rec, new_addr, new_len, new_access, new_pd.pd_id):
            return int(E.IBV_REREG_MR_ERR_CMD)
        if new_pd is not self._pd:
            self._pd = new_pd
            new_pd.add_ref(self)
        return 0

    # -- lifetime -----------------------------------------------------------------------
    def close(self) -> None:
        """``ibv_dereg_mr``; raises PyverbsRDMAError('Failed to dereg MR', rc) on failure."""
        if self._closed:
            return
        self._nic.dereg_mr(self._rec)     # an injected failure leaves the MR open
        self._closed = True
        self._finalizer.detach()
        if self._owned is not None:
            self._nic.node.free(self._owned)

    def __enter__(self) -> MR:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return (f"MR(buf={self._rec.addr:#x}, length={self._rec.length}, "
                f"lkey={self._rec.lkey:#x}, {state})")
