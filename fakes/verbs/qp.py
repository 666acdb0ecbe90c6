"""``pyverbs.qp``: QPCap, QPInitAttr, QPAttr, QP — RC queue pairs (mooncake-verbs.md §4.5).

The state machine is the IB one (RESET→INIT→RTR→RTS, any→ERR/RESET); an illegal
``modify`` fails with EINVAL. ``to_rtr`` records the peer (dest QPN and the address handle),
which is how two nodes of a fabric are connected. ``post_send`` checks only what the
driver checks at post time (state, SGE count, queue depth, §4.5); keys and ranges are
checked when the WR executes (:mod:`.transfer`, §5.3), and a failed WR puts the QP in
ERR, after which every WR is flushed (``IBV_WC_WR_FLUSH_ERR``).
"""

from __future__ import annotations

import errno
import functools
from collections import deque
from typing import TYPE_CHECKING, Any

from . import enums as V
from .addr import AHAttr
from .cq import CQ, WC
from .device import Context
from .errors import NotModelledError, PyverbsRDMAError, PyverbsUserError
from .pd import PD
from .transfer import execute_send
from .wr import RecvWR, SendWR

if TYPE_CHECKING:
    from .node import Nic

__all__ = ["QP", "QPAttr", "QPCap", "QPInitAttr"]

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
# the attribute masks pyverbs' to_init/to_rtr/to_rts pass for RC
_RC_MASKS = {
    S.IBV_QPS_INIT: M.IBV_QP_STATE | M.IBV_QP_PKEY_INDEX | M.IBV_QP_PORT | M.IBV_QP_ACCESS_FLAGS,
    S.IBV_QPS_RTR: (M.IBV_QP_STATE | M.IBV_QP_AV | M.IBV_QP_PATH_MTU | M.IBV_QP_DEST_QPN |
                    M.IBV_QP_RQ_PSN | M.IBV_QP_MAX_DEST_RD_ATOMIC | M.IBV_QP_MIN_RNR_TIMER),
    S.IBV_QPS_RTS: (M.IBV_QP_STATE | M.IBV_QP_TIMEOUT | M.IBV_QP_RETRY_CNT |
                    M.IBV_QP_RNR_RETRY | M.IBV_QP_SQ_PSN | M.IBV_QP_MAX_QP_RD_ATOMIC),
}


class QPCap:
    """Queue depths and SGE limits requested at creation."""

    def __init__(self, max_send_wr: int = 1, max_recv_wr: int = 10, max_send_sge: int = 1,
                 max_recv_sge: int = 1, max_inline_data: int = 0) -> None:
        self.max_send_wr = max_send_wr
        self.max_recv_wr = max_recv_wr
        self.max_send_sge = max_send_sge
        self.max_recv_sge = max_recv_sge
        self.max_inline_data = max_inline_data


class QPInitAttr:
    """Creation attributes; pyverbs' default type is UD, so RC users pass ``qp_type``."""

    def __init__(self, qp_type: int = int(V.ibv_qp_type.IBV_QPT_UD), qp_context: Any = None,
                 scq: CQ | None = None, rcq: CQ | None = None, srq: Any = None,
                 cap: QPCap | None = None, sq_sig_all: int = 1) -> None:
        self.qp_type = int(qp_type)
        self.qp_context = qp_context
        self.send_cq = scq
        self.recv_cq = rcq
        self.srq = srq
        self.cap = cap or QPCap()
        self.sq_sig_all = sq_sig_all
        self.pd: PD | None = None


class QPAttr:
    """``ibv_qp_attr`` with settable fields, as passed to ``to_init``/``to_rtr``/``to_rts``."""

    def __init__(self, qp_state: int = int(S.IBV_QPS_INIT),
                 cur_qp_state: int = int(S.IBV_QPS_RESET), port_num: int = 1,
                 path_mtu: int = int(V.ibv_mtu.IBV_MTU_1024)) -> None:
        self.qp_state = qp_state
        self.cur_qp_state = cur_qp_state
        self.port_num = port_num
        self.path_mtu = path_mtu
        self.qp_access_flags = 0
        self.pkey_index = 0
        self.qkey = 0
        self.dest_qp_num = 0
        self.rq_psn = 0
        self.sq_psn = 0
        self.ah_attr: AHAttr = AHAttr(port_num=0)   # pyverbs: an all-zero AH by default
        self.timeout = 0
        self.retry_cnt = 0
        self.rnr_retry = 0
        self.min_rnr_timer = 0
        self.max_rd_atomic = 0
        self.max_dest_rd_atomic = 0
        self.cap: QPCap | None = None


class QP:
    """A queue pair; only RC carries traffic in the fake."""

    def __init__(self, creator: PD | Context, init_attr: QPInitAttr,
                 qp_attr: QPAttr | None = None) -> None:
        self._closed = True
        pd = creator if isinstance(creator, PD) else getattr(init_attr, "pd", None)
        if not isinstance(pd, PD):
            raise PyverbsUserError("QP needs a PD (or a Context with init_attr.pd set)")
        self._pd = pd
        self._nic: Nic = pd.nic
        attr = self._nic.attr
        cap = init_attr.cap
        if (cap.max_send_wr > attr["max_qp_wr"] or cap.max_recv_wr > attr["max_qp_wr"]
                or cap.max_send_sge > attr["max_sge"] or cap.max_recv_sge > attr["max_sge"]
                or init_attr.send_cq is None or init_attr.recv_cq is None):
            raise PyverbsRDMAError("Failed to create QP", errno.EINVAL)
        if len(self._nic.qps) >= int(attr["max_qp"]):
            raise PyverbsRDMAError("Failed to create QP", errno.ENOMEM)
        self.qp_type = init_attr.qp_type
        self.cap = cap
        self.scq: CQ = init_attr.send_cq
        self.rcq: CQ = init_attr.recv_cq
        self.sq_sig_all = bool(init_attr.sq_sig_all)
        self._qpn = self._nic.node.fabric.new_qpn()
        self._state = S.IBV_QPS_RESET
        self.attr = QPAttr(qp_state=int(S.IBV_QPS_RESET))
        self._rq: deque[RecvWR] = deque()
        self._sq_outstanding: deque[int] = deque()   # WR sequence numbers holding SQ slots
        self._seq = 0
        self._nic.qps[self._qpn] = self
        self._closed = False
        pd.add_ref(self)
        self.scq.add_ref(self)
        self.rcq.add_ref(self)
        if qp_attr is not None:
            # pyverbs: connected QPs stop in INIT (the peer QPN is still unknown)
            if self.qp_type in (V.ibv_qp_type.IBV_QPT_RC, V.ibv_qp_type.IBV_QPT_UC):
                self.to_init(qp_attr)
            else:
                self.to_rts(qp_attr)

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
    def to_init(self, qp_attr: QPAttr) -> None:
        qp_attr.qp_state = int(S.IBV_QPS_INIT)
        self._modify(qp_attr, _RC_MASKS[S.IBV_QPS_INIT], "init")

    def to_rtr(self, qp_attr: QPAttr) -> None:
        if self._state != S.IBV_QPS_INIT:
            self.to_init(qp_attr)
        qp_attr.qp_state = int(S.IBV_QPS_RTR)
        self._modify(qp_attr, _RC_MASKS[S.IBV_QPS_RTR], "RTR")

    def to_rts(self, qp_attr: QPAttr) -> None:
        if self._state != S.IBV_QPS_RTR:
            self.to_rtr(qp_attr)
        qp_attr.qp_state = int(S.IBV_QPS_RTS)
        self._modify(qp_attr, _RC_MASKS[S.IBV_QPS_RTS], "RTS")

    def modify(self, qp_attr: QPAttr, attr_mask: int) -> None:
        """``ibv_modify_qp``: EINVAL for a transition the IB state diagram forbids."""
        self._modify(qp_attr, attr_mask, None)

    def _modify(self, qp_attr: QPAttr, mask: int, label: str | None) -> None:
        if self._closed:
            raise PyverbsRDMAError("Failed to modify QP", errno.EINVAL)
        target = S(qp_attr.qp_state) if mask & M.IBV_QP_STATE else self._state
        legal = target in (S.IBV_QPS_RESET, S.IBV_QPS_ERR) or (self._state, target) in _LEGAL
        if not legal:
            msg = f"Failed to modify QP state to {label}" if label else "Failed to modify QP"
            raise PyverbsRDMAError(msg, errno.EINVAL)
        for name in ("port_num", "qp_access_flags", "pkey_index", "dest_qp_num", "rq_psn",
                     "sq_psn", "path_mtu", "timeout", "retry_cnt", "rnr_retry",
                     "min_rnr_timer", "max_rd_atomic", "max_dest_rd_atomic"):
            setattr(self.attr, name, getattr(qp_attr, name))
        self.attr.ah_attr = qp_attr.ah_attr
        if target == S.IBV_QPS_ERR:
            self.set_error()
        elif target == S.IBV_QPS_RESET:
            self._rq.clear()
            self._sq_outstanding.clear()
            self._state = target
        else:
            self._state = target
        self.attr.qp_state = int(self._state)

    def set_error(self) -> None:
        """Move to ERR and flush the receive queue (§5.3)."""
        self._state = S.IBV_QPS_ERR
        self.attr.qp_state = int(self._state)
        while self._rq:
            wr = self._rq.popleft()
            self.rcq.push(WC(wr_id=wr.wr_id, status=int(V.ibv_wc_status.IBV_WC_WR_FLUSH_ERR),
                             opcode=int(V.ibv_wc_opcode.IBV_WC_RECV), qp_num=self._qpn))

    def query(self, attr_mask: int = 0) -> tuple[QPAttr, QPInitAttr]:
        init = QPInitAttr(qp_type=self.qp_type, scq=self.scq, rcq=self.rcq, cap=self.cap,
                          sq_sig_all=int(self.sq_sig_all))
        return self.attr, init

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
                raise NotModelledError("kvreg's fake pyverbs carries traffic on RC QPs only")
            self._seq += 1
            seq = self._seq
            self._sq_outstanding.append(seq)
            wc = execute_send(self, wr)
            if wc is None:
                self._retire(seq)
            else:
                self.scq.push(wc, functools.partial(self._retire, seq))

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
