"""``pyverbs.qp.QPEx``: the work-request API newer transfer engines post with.

``ibv_create_qp_ex`` with ``IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`` gives a QP whose sends are
built between ``wr_start()`` and ``wr_complete()`` (libibverbs ``ibv_wr_*``): set
``wr_id`` and ``wr_flags``, pick the operation (``wr_rdma_write(rkey, remote_addr)``,
``wr_rdma_read``, ``wr_send``), then its local buffer (``wr_set_sge`` /
``wr_set_sge_list``). ``wr_complete`` posts them all; they execute exactly as ``post_send``
WRs do (same checks, same completions), ``wr_abort`` drops them. An operation the QP was
not created for (its ``send_ops_flags`` bit is missing) is refused with a clear error: on
real hardware its function pointer is unset and the call is undefined.
"""

from __future__ import annotations

from typing import Any

from . import enums as V
from .errors import PyverbsRDMAError, PyverbsUserError
from .qp import QP
from .qp_attr import QPAttr, QPInitAttrEx
from .wr import SGE, SendWR

__all__ = ["QPEX_NOT_MODELLED", "QPEx"]

# QPEx methods of rdma-core's pyverbs that the fake does not model (present, as on the
# real class, but raising NotModelledError when called)
QPEX_NOT_MODELLED = frozenset({
    "wr_atomic_cmp_swp", "wr_atomic_fetch_add", "wr_atomic_write", "wr_bind_mw",
    "wr_local_inv", "wr_rdma_write_imm", "wr_send_imm", "wr_send_inv", "wr_send_tso",
    "wr_set_inline_data", "wr_set_inline_data_list", "wr_set_ud_addr", "wr_set_xrc_srqn",
    "wr_flush"})
_OPS = V.ENUMS["ibv_qp_create_send_ops_flags"]
_WR = V.ibv_wr_opcode


class QPEx(QP):
    """An extended QP; build it with a ``QPInitAttrEx`` that names its PD and send ops."""

    NOT_MODELLED_ATTRS = QP.NOT_MODELLED_ATTRS | QPEX_NOT_MODELLED

    def __init__(self, creator: Any, init_attr: QPInitAttrEx,
                 qp_attr: QPAttr | None = None) -> None:
        if not isinstance(init_attr, QPInitAttrEx):
            raise PyverbsUserError("QPEx needs a QPInitAttrEx")
        pd = init_attr.pd if init_attr.pd is not None else creator
        super().__init__(pd, init_attr, qp_attr)
        self.send_ops_flags = int(init_attr.send_ops_flags)
        self.comp_mask = int(init_attr.comp_mask)
        self.ind_table = init_attr.ind_table
        self.wr_id = 0
        self.wr_flags = 0
        self._batch: list[SendWR] | None = None
        self._cur: SendWR | None = None

    # -- building -----------------------------------------------------------------------
    def wr_start(self) -> None:
        self._batch = []
        self._cur = None

    def _begin(self, opcode: int, flag: str) -> SendWR:
        if self._batch is None:
            raise PyverbsUserError("wr_start() must come before a work request")
        if not self.send_ops_flags & int(_OPS[flag]):
            raise PyverbsUserError(f"the QP was created without {flag} in send_ops_flags")
        # the SGE is set by wr_set_sge; a placeholder keeps SendWR's one-SGE rule
        wr = SendWR(wr_id=self.wr_id, opcode=opcode, num_sge=1, sg=[SGE(0, 0, 0)],
                    send_flags=self.wr_flags)
        self._batch.append(wr)
        self._cur = wr
        return wr

    def wr_rdma_write(self, rkey: int, remote_addr: int) -> None:
        self._begin(int(_WR.IBV_WR_RDMA_WRITE), "IBV_QP_EX_WITH_RDMA_WRITE").set_wr_rdma(
            rkey, remote_addr)

    def wr_rdma_read(self, rkey: int, remote_addr: int) -> None:
        self._begin(int(_WR.IBV_WR_RDMA_READ), "IBV_QP_EX_WITH_RDMA_READ").set_wr_rdma(
            rkey, remote_addr)

    def wr_send(self) -> None:
        self._begin(int(_WR.IBV_WR_SEND), "IBV_QP_EX_WITH_SEND")

    def wr_set_sge(self, sge: SGE) -> None:
        """One SGE object, as pyverbs takes it (qp.pyx ``wr_set_sge(self, SGE sge not None)``
        since v44; rdma-core tests/test_qpex.py passes ``SGE(addr, length, lkey)``)."""
        if not isinstance(sge, SGE):
            raise TypeError(f"Argument 'sge' has incorrect type (expected pyverbs.wr.SGE, got "
                            f"{type(sge).__name__})")
        self.wr_set_sge_list(1, [sge])

    def wr_set_sge_list(self, num_sge: int, sg_list: list[SGE]) -> None:
        """The first ``num_sge`` SGEs of ``sg_list`` (qp.pyx ``wr_set_sge_list(num_sge,
        sg_list)``)."""
        sg_list = list(sg_list)[:num_sge]
        if self._cur is None:
            raise PyverbsUserError("wr_set_sge needs a work request (wr_rdma_write, ...)")
        if not sg_list:
            raise PyverbsUserError("A WR needs at least one SGE")
        cur = self._cur
        replaced = SendWR(wr_id=cur.wr_id, opcode=cur.opcode, num_sge=len(sg_list),
                          sg=list(sg_list), send_flags=cur.send_flags)
        replaced.set_wr_rdma(cur.rkey, cur.remote_addr)
        assert self._batch is not None
        self._batch[-1] = self._cur = replaced

    # -- posting ------------------------------------------------------------------------
    def wr_complete(self) -> None:
        """Post every WR built since ``wr_start``; they run as ``post_send`` WRs do."""
        batch, self._batch, self._cur = self._batch, None, None
        if batch is None:
            raise PyverbsUserError("wr_complete() without wr_start()")
        if any(len(wr.sg_list) == 1 and wr.sg_list[0].lkey == 0 == wr.sg_list[0].length
               for wr in batch):
            raise PyverbsRDMAError("ibv_wr_complete failed", 22)   # a WR without its SGE
        for wr in batch:
            self.post_send(wr)

    def wr_abort(self) -> None:
        self._batch, self._cur = None, None
