"""``pyverbs.qp``: QPCap, QPInitAttr, QPAttr, QP — RC queue pairs (docs/mooncake-verbs.md §4.5).

The state machine is the IB one (RESET→INIT→RTR→RTS, any→ERR/RESET); an illegal
``modify`` fails with EINVAL. ``to_rtr`` records the peer (dest QPN and the address handle),
which is how two nodes of a fabric are connected. ``post_send`` checks only what the
driver checks at post time (state, SGE count, queue depth, §4.5); keys and ranges are
checked when the WR executes (:mod:`.transfer`, §5.3), and a failed WR puts the QP in
ERR, after which every WR is flushed (``IBV_WC_WR_FLUSH_ERR``).
"""

from __future__ import annotations

import copy
import errno
import functools
from collections import deque
from typing import TYPE_CHECKING, Any

from . import enums as V
from .cq import CQ, WC
from .device import Context
from .errors import COVERAGE_HINT, NotModelledError, PyverbsRDMAError, PyverbsUserError, StandIns
from .pd import PD
from .qp_attr import (
    FIELDS_BY_MASK,
    PYVERBS_MASKS,
    REQUIRED_MASKS,
    QPAttr,
    QPCap,
    QPInitAttr,
    QPInitAttrEx,
)
from .transfer import execute_send
from .wr import RecvWR, SendWR

if TYPE_CHECKING:
    from .node import Nic

__all__ = ["QP", "QPAttr", "QPCap", "QPInitAttr", "QPInitAttrEx"]

S = V.ibv_qp_state
M = V.ibv_qp_attr_mask

# IB spec state diagram (what ibv_modify_qp accepts); RESET and ERR are reachable from all
_LEGAL = {
    (S.IBV_QPS_RESET, S.IBV_QPS_INIT), (S.IBV_QPS_INIT, S.IBV_QPS_INIT),
    (S.IBV_QPS_INIT, S.IBV_QPS_RTR), (S.IBV_QPS_RTR, S.IBV_QPS_RTS),
    (S.IBV_QPS_RTS, S.IBV_QPS_RTS), (S.IBV_QPS_RTS, S.IBV_QPS_SQD),
    (S.IBV_QPS_SQD, S.IBV_QPS_RTS), (S.IBV_QPS_SQD, S.IBV_QPS_SQD),
    (S.IBV_QPS_SQE, S.IBV_QPS_RTS),
}


def _copied(value: Any) -> Any:
    return copy.copy(value) if not isinstance(value, int) else value


class QP(StandIns):
    """A queue pair; only RC carries traffic in the fake."""

    NOT_MODELLED_ATTRS = frozenset({"bind_mw", "query_data_in_order", "query_ece", "set_ece"})

    def __init__(self, creator: PD | Context, init_attr: QPInitAttr,
                 qp_attr: QPAttr | None = None) -> None:
        self._closed = True
        pd = creator if isinstance(creator, PD) else getattr(init_attr, "pd", None)
        if not isinstance(pd, PD):
            raise PyverbsUserError("QP needs a PD (or a Context with init_attr.pd set)")
        self._pd = pd
        self._nic: Nic = pd.nic
        err = self._create_errno(init_attr)
        if err:
            raise PyverbsRDMAError("Failed to create QP", err)
        self.qp_type = int(init_attr.qp_type)
        self.cap: QPCap = init_attr.cap
        self.scq: CQ = init_attr.send_cq
        self.rcq: CQ = init_attr.recv_cq
        self.sq_sig_all = bool(init_attr.sq_sig_all)
        self._qpn = self._nic.node.fabric.new_qpn()
        self._state = S.IBV_QPS_RESET
        self.attr = QPAttr(qp_state=int(S.IBV_QPS_RESET))
        self._rq: deque[RecvWR] = deque()
        self._sq_outstanding: deque[int] = deque()   # WR sequence numbers holding SQ slots
        self._stalled: list[tuple[int, SendWR]] = []  # READs waiting for rd_atomic credit
        self._seq = 0
        self._nic.qps[self._qpn] = self
        self._closed = False
        pd.add_ref(self)
        self.scq.add_ref(self)
        self.rcq.add_ref(self)
        if qp_attr is not None:
            # pyverbs: connected QPs stop in INIT (the peer QPN is still unknown)
            if self.qp_type in (V.ibv_qp_type.IBV_QPT_RC, V.ibv_qp_type.IBV_QPT_UC,
                                V.ibv_qp_type.IBV_QPT_XRC_SEND,
                                V.ibv_qp_type.IBV_QPT_XRC_RECV):
                self.to_init(qp_attr)
            else:
                self.to_rts(qp_attr)

    def _create_errno(self, init_attr: QPInitAttr) -> int:
        """``ibv_create_qp``'s errno, in the driver's order of checks; 0 if none."""
        nic = self._nic
        attr = nic.attr
        # rxe_qp.c rxe_qp_chk_init: a QP type the driver does not implement -> EOPNOTSUPP
        if int(init_attr.qp_type) not in nic.profile.qp_types:
            return errno.EOPNOTSUPP
        if init_attr.send_cq is None or init_attr.recv_cq is None:
            return errno.EINVAL
        # rxe_qp.c rxe_qp_chk_cap: caps above the device's -> EINVAL
        cap = init_attr.cap
        if (cap.max_send_wr > attr["max_qp_wr"] or cap.max_recv_wr > attr["max_qp_wr"]
                or cap.max_send_sge > attr["max_sge"] or cap.max_recv_sge > attr["max_sge"]
                or cap.max_inline_data > nic.profile.max_inline_data
                or min(cap.max_send_wr, cap.max_recv_wr, cap.max_send_sge,
                       cap.max_recv_sge, cap.max_inline_data) < 0):
            return errno.EINVAL
        if len(nic.qps) >= int(attr["max_qp"]):
            return errno.ENOMEM
        return 0

    # -- identity -----------------------------------------------------------------------
    @property
    def qp_num(self) -> int:
        return self._qpn

    @property
    def qp_state(self) -> int:
        return int(self._state)

    @property
    def pd(self) -> PD:
        return self._pd

    @property
    def nic(self) -> Nic:
        return self._nic

    # -- state machine ------------------------------------------------------------------
    def _pyverbs_mask(self, state: int) -> int:
        masks = PYVERBS_MASKS.get(self.qp_type, PYVERBS_MASKS[int(V.ibv_qp_type.IBV_QPT_RC)])
        return masks[state]

    def to_init(self, qp_attr: QPAttr) -> None:
        qp_attr.qp_state = int(S.IBV_QPS_INIT)
        self._modify(qp_attr, self._pyverbs_mask(int(S.IBV_QPS_INIT)), "init")

    def to_rtr(self, qp_attr: QPAttr) -> None:
        """RTR, going through INIT first only when the QP is not already in INIT, as
        pyverbs' ``QP.to_rtr`` does (qp.pyx: ``if self.qp_state != IBV_QPS_INIT``): so a
        QP created in INIT keeps the ``qp_access_flags`` it got then, and flags given
        only to ``to_rtr``/``to_rts`` do not reach the responder."""
        if self._state != S.IBV_QPS_INIT:
            self.to_init(qp_attr)
        qp_attr.qp_state = int(S.IBV_QPS_RTR)
        self._modify(qp_attr, self._pyverbs_mask(int(S.IBV_QPS_RTR)), "RTR")

    def to_rts(self, qp_attr: QPAttr) -> None:
        if self._state != S.IBV_QPS_RTR:
            self.to_rtr(qp_attr)
        qp_attr.qp_state = int(S.IBV_QPS_RTS)
        self._modify(qp_attr, self._pyverbs_mask(int(S.IBV_QPS_RTS)), "RTS")

    def modify(self, qp_attr: QPAttr, attr_mask: int) -> None:
        """``ibv_modify_qp``: only the fields ``attr_mask`` names change (rxe_qp.c
        ``rxe_qp_from_attr``); EINVAL for a transition the IB state diagram forbids or one
        missing a required attribute (verbs.c ``ib_modify_qp_is_ok``)."""
        self._modify(qp_attr, int(attr_mask), None)

    def _modify_errno(self, qp_attr: QPAttr, mask: int, target: int) -> int:
        if self._closed:
            return errno.EINVAL
        cur = int(self._state)
        if not (target in (S.IBV_QPS_RESET, S.IBV_QPS_ERR) or (cur, target) in _LEGAL):
            return errno.EINVAL
        needed = REQUIRED_MASKS.get((cur, target), {}).get(self.qp_type, 0)
        if mask & M.IBV_QP_STATE and needed & ~mask:
            return errno.EINVAL
        attr = self._nic.attr
        # rxe_qp.c rxe_qp_chk_attr: read/atomic depths above the device's -> EINVAL
        if mask & M.IBV_QP_MAX_QP_RD_ATOMIC and \
                qp_attr.max_rd_atomic > int(attr["max_qp_init_rd_atom"]):
            return errno.EINVAL
        if mask & M.IBV_QP_MAX_DEST_RD_ATOMIC and \
                qp_attr.max_dest_rd_atomic > int(attr["max_qp_rd_atom"]):
            return errno.EINVAL
        if mask & M.IBV_QP_PORT and not 1 <= qp_attr.port_num <= len(self._nic.ports):
            return errno.EINVAL
        return 0

    def _modify(self, qp_attr: QPAttr, mask: int, label: str | None) -> None:
        target = int(qp_attr.qp_state) if mask & M.IBV_QP_STATE else int(self._state)
        err = self._modify_errno(qp_attr, mask, target)
        if err:
            msg = f"Failed to modify QP state to {label}" if label else "Failed to modify QP"
            raise PyverbsRDMAError(msg, err)
        for bit, fields in FIELDS_BY_MASK.items():
            if mask & bit and bit != M.IBV_QP_STATE:
                for name in fields:
                    value = getattr(qp_attr, name)
                    object.__setattr__(self.attr, name,
                                       value.copy() if hasattr(value, "copy") else
                                       _copied(value))
        if target == S.IBV_QPS_ERR:
            self.set_error()
        elif target == S.IBV_QPS_RESET:
            self._rq.clear()
            self._sq_outstanding.clear()
            self._stalled.clear()
            # the QP's unpolled completions go too (mlx5_cq_clean on RESET); rdma-core's
            # test_mr.py::test_mr_rereg_pd restates an errored QP and expects clean traffic
            self.rcq.clean(self._qpn)
            if self.scq is not self.rcq:
                self.scq.clean(self._qpn)
            self._state = S.IBV_QPS_RESET
        else:
            self._state = S(target)
        self.attr.qp_state = int(self._state)

    def set_error(self) -> None:
        """Move to ERR and flush the receive queue and stalled sends (§5.3)."""
        self._state = S.IBV_QPS_ERR
        self.attr.qp_state = int(self._state)
        flush = int(V.ibv_wc_status.IBV_WC_WR_FLUSH_ERR)
        while self._rq:
            wr = self._rq.popleft()
            self.rcq.push(WC(wr_id=wr.wr_id, status=flush,
                             opcode=int(V.ibv_wc_opcode.IBV_WC_RECV), qp_num=self._qpn))
        stalled, self._stalled = self._stalled, []
        for seq, swr in stalled:
            self.scq.push(WC(wr_id=swr.wr_id, status=flush,
                             opcode=int(V.ibv_wc_opcode.IBV_WC_RDMA_READ), qp_num=self._qpn),
                          functools.partial(self._retire, seq))

    def query(self, attr_mask: int = 0) -> tuple[QPAttr, QPInitAttr]:
        """Fresh copies of the QP's attributes (pyverbs fills a new ``QPAttr``)."""
        attr = self.attr.copy()
        attr.qp_state = attr.cur_qp_state = int(self._state)
        attr.cap = self.cap
        init = QPInitAttr(qp_type=self.qp_type, scq=self.scq, rcq=self.rcq, cap=self.cap,
                          sq_sig_all=int(self.sq_sig_all))
        return attr, init

    # -- posting ------------------------------------------------------------------------
    def post_send(self, send_wr: SendWR, bad_wr: Any = None) -> None:
        """Post a WR chain; WRs execute at once and their completions go to the send CQ."""
        fabric = self._nic.node.fabric
        for wr in send_wr.chain():
            args = (wr.sg_list[0].addr if wr.sg_list else 0,
                    sum(s.length for s in wr.sg_list), wr.opcode, wr.wr_id)
            code = fabric.check_fault("verbs.post_send", self._nic.face, "post_send", args,
                                      self._nic.node)
            if code is None:
                code = self._post_errno(wr)
                injected = False
            else:
                injected = True
            if code:
                fabric.trace.append(self._nic.face, "post_send", args, code, None, injected)
                raise PyverbsRDMAError("Failed to post send", code)
            if self.qp_type != V.ibv_qp_type.IBV_QPT_RC:
                raise NotModelledError("kvreg's fake pyverbs carries traffic on RC QPs only "
                                       f"({COVERAGE_HINT})")
            self._seq += 1
            seq = self._seq
            self._sq_outstanding.append(seq)
            if self._stalls(wr):
                # rxe_req.c check_init_depth: a READ needs an initiator-depth credit
                # (max_rd_atomic); with none the requester waits, and the WR never
                # completes until the QP is flushed
                self._stalled.append((seq, wr))
                fabric.trace.append(self._nic.face, "wr.rdma_read", args, None,
                                    {"stalled": "max_rd_atomic is 0"}, False)
                continue
            wc = execute_send(self, wr)
            if wc is None:
                self._retire(seq)
                continue
            self.scq.push(wc, functools.partial(self._retire, seq))
            if wc.status != V.ibv_wc_status.IBV_WC_SUCCESS and self._state != S.IBV_QPS_ERR:
                # the failing WR completes first, then the queues flush (rdma-core
                # tests/test_mr.py::test_mr_rereg_pd polls the error before the flushes)
                self.set_error()

    def _stalls(self, wr: SendWR) -> bool:
        return bool(wr.opcode == V.ibv_wr_opcode.IBV_WR_RDMA_READ and
                    self._state != S.IBV_QPS_ERR and self.attr.max_rd_atomic == 0)

    def _post_errno(self, wr: SendWR) -> int:
        # §4.5: immediate post errors are EINVAL (bad WR / state) or ENOMEM (queue full)
        if self._closed or self._state in (S.IBV_QPS_RESET, S.IBV_QPS_INIT, S.IBV_QPS_RTR):
            return errno.EINVAL
        if wr.num_sge > self.cap.max_send_sge:
            return errno.EINVAL
        if len(self._sq_outstanding) >= self.cap.max_send_wr:
            return errno.ENOMEM
        return 0

    def _retire(self, seq: int) -> None:
        while self._sq_outstanding and self._sq_outstanding[0] <= seq:
            self._sq_outstanding.popleft()

    def post_recv(self, recv_wr: RecvWR, bad_wr: Any = None) -> None:
        """Queue receive WRs; in ERR they complete at once as flushed."""
        fabric = self._nic.node.fabric
        for wr in recv_wr.chain():
            args = (wr.sg_list[0].addr if wr.sg_list else 0,
                    sum(s.length for s in wr.sg_list), wr.wr_id)
            code = fabric.check_fault("verbs.post_recv", self._nic.face, "post_recv", args,
                                      self._nic.node)
            injected = code is not None
            if code is None:
                code = 0
                if self._closed or self._state == S.IBV_QPS_RESET or \
                        wr.num_sge > self.cap.max_recv_sge:
                    code = errno.EINVAL
                elif len(self._rq) >= self.cap.max_recv_wr:
                    code = errno.ENOMEM
            if code:
                fabric.trace.append(self._nic.face, "post_recv", args, code, None, injected)
                raise PyverbsRDMAError("Failed to post recv", code)
            self._rq.append(wr)
            if self._state == S.IBV_QPS_ERR:
                self.set_error()

    def pop_recv(self) -> RecvWR | None:
        """The oldest posted receive WR (an incoming SEND consumes it)."""
        return self._rq.popleft() if self._rq else None

    # -- lifetime -----------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        if self._closed:
            return
        self._nic.qps.pop(self._qpn, None)
        self._closed = True

    def __enter__(self) -> QP:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
