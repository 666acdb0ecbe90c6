"""``pyverbs.wr``: SGE, SendWR, RecvWR (docs/mooncake-verbs.md §4.5).

Construction checks what pyverbs checks: an SGE length is a C ``uint32`` (< 4 GiB), and a
WR other than the memory-window/invalidate kinds needs at least one SGE
(``PyverbsUserError('A WR needs at least one SGE')``). Keys and ranges are *not* checked
here: as on real NICs, they are checked when the WR executes (§5.3).
"""

from __future__ import annotations

from collections.abc import Sequence

from . import enums as V
from .cints import c_size_t, c_uint
from .errors import NotModelledError, PyverbsUserError, StandIns

__all__ = ["SGE", "RecvWR", "SendWR"]

_NO_SGE_OPCODES = frozenset({int(V.ibv_wr_opcode.IBV_WR_BIND_MW),
                             int(V.ibv_wr_opcode.IBV_WR_LOCAL_INV),
                             int(V.ibv_wr_opcode.IBV_WR_SEND_WITH_INV)})


class SGE(StandIns):
    """One scatter/gather element: ``addr`` (u64), ``length`` (u32), ``lkey`` (u32)."""

    NOT_MODELLED_ATTRS = frozenset({"close", "read"})

    def __init__(self, addr: int, length: int, lkey: int) -> None:
        self.addr = addr
        self.length = length
        self.lkey = lkey

    @property
    def addr(self) -> int:
        return self._addr

    @addr.setter
    def addr(self, value: int) -> None:
        self._addr = c_size_t(value, "SGE addr")

    @property
    def length(self) -> int:
        return self._length

    @length.setter
    def length(self, value: int) -> None:
        # §4.5: length is a uint32 in C, so an SGE is < 4 GiB
        self._length = c_uint(value, "SGE length")

    @property
    def lkey(self) -> int:
        return self._lkey

    @lkey.setter
    def lkey(self, value: int) -> None:
        self._lkey = c_uint(value, "SGE lkey")

    def __repr__(self) -> str:
        return f"SGE(addr={self._addr:#x}, length={self._length}, lkey={self._lkey:#x})"


def _sg_list(num_sge: int, sg: Sequence[SGE] | None, opcode: int | None) -> list[SGE]:
    if num_sge < 1 or sg is None:
        if opcode is not None and opcode in _NO_SGE_OPCODES:
            return []
        raise PyverbsUserError("A WR needs at least one SGE")
    items = list(sg)
    if len(items) < num_sge:
        raise PyverbsUserError(f"num_sge is {num_sge} but sg holds {len(items)} SGE(s)")
    for s in items[:num_sge]:
        if not isinstance(s, SGE):
            raise PyverbsUserError(f"sg must hold SGE objects, got {type(s).__name__}")
    return items[:num_sge]


class SendWR(StandIns):
    """A send-queue work request; ``set_wr_rdma(rkey, addr)`` makes it an RDMA op."""

    NOT_MODELLED_ATTRS = frozenset({"close", "set_bind_wr", "set_qp_type_xrc"})

    def __init__(self, wr_id: int = 0, opcode: int = int(V.ibv_wr_opcode.IBV_WR_SEND),
                 num_sge: int = 0, imm_data: int = 0, sg: Sequence[SGE] | None = None,
                 send_flags: int = int(V.ibv_send_flags.IBV_SEND_SIGNALED),
                 next_wr: SendWR | None = None) -> None:
        self.wr_id = wr_id
        self.opcode = int(opcode)
        self._sg = _sg_list(num_sge, sg, self.opcode)
        self.imm_data = imm_data
        self.send_flags = int(send_flags)
        self.next_wr = next_wr
        self.rkey = 0
        self.remote_addr = 0

    @property
    def num_sge(self) -> int:
        return len(self._sg)

    @property
    def sg_list(self) -> list[SGE]:
        return list(self._sg)

    def set_wr_rdma(self, rkey: int, addr: int) -> None:
        """The remote side of an RDMA READ/WRITE: key and address."""
        self.rkey = c_uint(rkey, "rkey")
        self.remote_addr = c_size_t(addr, "remote addr")

    def set_wr_ud(self, *args: object, **kwargs: object) -> None:
        raise NotModelledError("kvreg's fake pyverbs carries RC traffic only (set_wr_ud)")

    def set_wr_atomic(self, *args: object, **kwargs: object) -> None:
        raise NotModelledError("kvreg's fake pyverbs does not model atomics (set_wr_atomic)")

    def chain(self) -> list[SendWR]:
        """This WR and the ones linked by ``next_wr``."""
        out: list[SendWR] = []
        wr: SendWR | None = self
        while wr is not None:
            out.append(wr)
            wr = wr.next_wr
        return out


class RecvWR(StandIns):
    """A receive-queue work request: where an incoming SEND lands."""

    NOT_MODELLED_ATTRS = frozenset({"close"})

    def __init__(self, wr_id: int = 0, num_sge: int = 0, sg: Sequence[SGE] | None = None,
                 next_wr: RecvWR | None = None) -> None:
        self.wr_id = wr_id
        self._sg = _sg_list(num_sge, sg, None)
        self.next_wr = next_wr

    @property
    def num_sge(self) -> int:
        return len(self._sg)

    @property
    def sg_list(self) -> list[SGE]:
        return list(self._sg)

    def chain(self) -> list[RecvWR]:
        out: list[RecvWR] = []
        wr: RecvWR | None = self
        while wr is not None:
            out.append(wr)
            wr = wr.next_wr
        return out
