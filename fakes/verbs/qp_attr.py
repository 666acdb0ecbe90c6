"""``pyverbs.qp`` attribute structs: QPCap, QPInitAttr, QPInitAttrEx, QPAttr, and masks.

They behave as pyverbs' Cython wrappers of the C structs do (checked against rdma-core
v44's pyverbs): ``QPInitAttr`` copies the ``QPCap`` it is given, and its ``max_send_wr``,
``max_recv_wr``, ``max_send_sge``, ``max_recv_sge`` and ``max_inline_data`` read and write
that copy (``attr.cap``); ``QPAttr.ah_attr`` and ``QPAttr.cap`` hand out copies, so
changing a returned object changes nothing. Numeric fields accept what Cython's C-integer
conversion accepts (``__int__``: a float is truncated; a negative value for an unsigned
field is an OverflowError).

The mask tables are the facts ``modify`` needs: which ``QPAttr`` fields each
``ibv_qp_attr_mask`` bit carries (the kernel copies only masked fields,
``rxe_qp_from_attr`` in drivers/infiniband/sw/rxe/rxe_qp.c), the masks pyverbs'
``to_init``/``to_rtr``/``to_rts`` pass per QP type (pyverbs ``_get_comp_mask``), and the
masks a transition requires (``ib_modify_qp_is_ok``' state table in
drivers/infiniband/core/verbs.c).
"""

from __future__ import annotations

import copy
from typing import Any

from .addr import AHAttr
from .enums import ibv_mtu, ibv_qp_attr_mask, ibv_qp_state, ibv_qp_type
from .errors import StandIns

__all__ = ["FIELDS_BY_MASK", "PYVERBS_MASKS", "REQUIRED_MASKS", "QPAttr", "QPCap",
           "QPInitAttr", "QPInitAttrEx", "c_int_of"]

S = ibv_qp_state
M = ibv_qp_attr_mask
T = ibv_qp_type


def c_int_of(value: Any, what: str, *, unsigned: bool = False) -> int:
    """Cython's conversion of a Python number to a C integer field (``__int__``)."""
    if isinstance(value, str | bytes) or not hasattr(value, "__int__"):
        raise TypeError("an integer is required")
    out = int(value)
    if unsigned and out < 0:
        raise OverflowError("can't convert negative value to unsigned int")
    return out


_CAP_FIELDS = ("max_send_wr", "max_recv_wr", "max_send_sge", "max_recv_sge",
               "max_inline_data")


class QPCap:
    """``ibv_qp_cap``: queue depths and SGE limits requested at creation (§4.5)."""

    def __init__(self, max_send_wr: int = 1, max_recv_wr: int = 10, max_send_sge: int = 1,
                 max_recv_sge: int = 1, max_inline_data: int = 0) -> None:
        self.max_send_wr = c_int_of(max_send_wr, "max_send_wr")
        self.max_recv_wr = c_int_of(max_recv_wr, "max_recv_wr")
        self.max_send_sge = c_int_of(max_send_sge, "max_send_sge")
        self.max_recv_sge = c_int_of(max_recv_sge, "max_recv_sge")
        self.max_inline_data = c_int_of(max_inline_data, "max_inline_data")

    def copy(self) -> QPCap:
        return QPCap(*(getattr(self, f) for f in _CAP_FIELDS))

    def __repr__(self) -> str:
        return "QPCap(" + ", ".join(f"{f}={getattr(self, f)}" for f in _CAP_FIELDS) + ")"


def _cap_property(name: str) -> property:
    def get(self: QPInitAttr) -> int:
        return int(getattr(self._cap, name))

    def put(self: QPInitAttr, value: int) -> None:
        setattr(self._cap, name, c_int_of(value, name))

    return property(get, put, doc=f"``cap.{name}`` (pyverbs writes it into the cap struct)")


class QPInitAttr:
    """``ibv_qp_init_attr``; pyverbs' default type is UD, so RC users pass ``qp_type``."""

    def __init__(self, qp_type: int = int(T.IBV_QPT_UD), qp_context: Any = None,
                 scq: Any = None, rcq: Any = None, srq: Any = None, cap: QPCap | None = None,
                 sq_sig_all: int = 1) -> None:
        self.qp_type = c_int_of(qp_type, "qp_type")
        self.qp_context = qp_context
        self.send_cq = scq
        self.recv_cq = rcq
        self.srq = srq
        self._cap = cap.copy() if cap is not None else QPCap(0, 0, 0, 0, 0)
        self.sq_sig_all = c_int_of(sq_sig_all, "sq_sig_all")
        self.pd: Any = None

    @property
    def cap(self) -> QPCap:
        """A copy of the caps (the struct inside is what the QP is created with)."""
        return self._cap.copy()

    @cap.setter
    def cap(self, value: QPCap) -> None:
        self._cap = value.copy()

    max_send_wr = _cap_property("max_send_wr")
    max_recv_wr = _cap_property("max_recv_wr")
    max_send_sge = _cap_property("max_send_sge")
    max_recv_sge = _cap_property("max_recv_sge")
    max_inline_data = _cap_property("max_inline_data")


class QPInitAttrEx(QPInitAttr, StandIns):
    """``ibv_qp_init_attr_ex``: adds the PD, ``comp_mask`` and the ``send_ops_flags`` that
    enable the ``QPEx`` work-request API (``wr_rdma_write``, ``wr_rdma_read``, ...)."""

    NOT_MODELLED_ATTRS = frozenset({"flags_to_str", "mask_to_str"})

    def __init__(self, qp_type: int = int(T.IBV_QPT_UD), qp_context: Any = None,
                 scq: Any = None, rcq: Any = None, srq: Any = None, cap: QPCap | None = None,
                 sq_sig_all: int = 0, comp_mask: int = 0, pd: Any = None, xrcd: Any = None,
                 create_flags: int = 0, max_tso_header: int = 0, source_qpn: int = 0,
                 hash_conf: Any = None, ind_table: Any = None,
                 send_ops_flags: int = 0) -> None:
        super().__init__(qp_type, qp_context, scq, rcq, srq, cap, sq_sig_all)
        self.comp_mask = c_int_of(comp_mask, "comp_mask")
        self.pd = pd
        self.xrcd = xrcd
        self.create_flags = c_int_of(create_flags, "create_flags")
        self.max_tso_header = c_int_of(max_tso_header, "max_tso_header")
        self.source_qpn = c_int_of(source_qpn, "source_qpn")
        self.hash_conf = hash_conf
        self.ind_table = ind_table
        self.send_ops_flags = c_int_of(send_ops_flags, "send_ops_flags")


_INT_FIELDS = ("qp_state", "cur_qp_state", "path_mtu", "path_mig_state", "qkey", "rq_psn",
               "sq_psn", "dest_qp_num", "qp_access_flags", "pkey_index", "alt_pkey_index",
               "en_sqd_async_notify", "sq_draining", "max_rd_atomic", "max_dest_rd_atomic",
               "min_rnr_timer", "port_num", "timeout", "retry_cnt", "rnr_retry",
               "alt_port_num", "alt_timeout", "rate_limit")

_ENUM_FIELDS = frozenset({"qp_state", "cur_qp_state", "path_mtu", "path_mig_state"})


class QPAttr:
    """``ibv_qp_attr``; every field settable, as passed to ``modify`` and the ``to_*``
    helpers. Unset fields are zero, as pyverbs' zeroed struct gives."""

    qp_state: int
    cur_qp_state: int
    path_mtu: int
    path_mig_state: int
    qkey: int
    rq_psn: int
    sq_psn: int
    dest_qp_num: int
    qp_access_flags: int
    pkey_index: int
    alt_pkey_index: int
    en_sqd_async_notify: int
    sq_draining: int
    max_rd_atomic: int
    max_dest_rd_atomic: int
    min_rnr_timer: int
    port_num: int
    timeout: int
    retry_cnt: int
    rnr_retry: int
    alt_port_num: int
    alt_timeout: int
    rate_limit: int

    def __init__(self, qp_state: int = int(S.IBV_QPS_INIT),
                 cur_qp_state: int = int(S.IBV_QPS_RESET), port_num: int = 1,
                 path_mtu: int = int(ibv_mtu.IBV_MTU_1024)) -> None:
        for name in _INT_FIELDS:
            object.__setattr__(self, name, 0)
        self.qp_state = qp_state
        self.cur_qp_state = cur_qp_state
        self.port_num = port_num
        self.path_mtu = path_mtu
        self._ah = AHAttr(port_num=0)       # pyverbs: an all-zero AH by default
        self._alt_ah = AHAttr(port_num=0)
        self._cap = QPCap(0, 0, 0, 0, 0)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _INT_FIELDS:
            value = c_int_of(value, name, unsigned=name not in _ENUM_FIELDS)
        object.__setattr__(self, name, value)

    @property
    def ah_attr(self) -> AHAttr:
        """A copy of the address vector (pyverbs copies the struct both ways)."""
        return copy.copy(self._ah)

    @ah_attr.setter
    def ah_attr(self, value: AHAttr) -> None:
        if not isinstance(value, AHAttr):
            raise TypeError(f"ah_attr must be an AHAttr, got {type(value).__name__}")
        self._ah = copy.copy(value)

    @property
    def alt_ah_attr(self) -> AHAttr:
        return copy.copy(self._alt_ah)

    @alt_ah_attr.setter
    def alt_ah_attr(self, value: AHAttr) -> None:
        if not isinstance(value, AHAttr):
            raise TypeError(f"alt_ah_attr must be an AHAttr, got {type(value).__name__}")
        self._alt_ah = copy.copy(value)

    @property
    def cap(self) -> QPCap:
        return self._cap.copy()

    @cap.setter
    def cap(self, value: QPCap) -> None:
        self._cap = value.copy()

    def copy(self) -> QPAttr:
        """A field-by-field copy (what ``QP.query`` hands out)."""
        out = QPAttr()
        for name in _INT_FIELDS:
            object.__setattr__(out, name, getattr(self, name))
        out._ah, out._alt_ah, out._cap = (copy.copy(self._ah), copy.copy(self._alt_ah),
                                          self._cap.copy())
        return out

    def __repr__(self) -> str:
        return (f"QPAttr(qp_state={self.qp_state}, dest_qp_num={self.dest_qp_num:#x}, "
                f"qp_access_flags={self.qp_access_flags})")


# ibv_qp_attr_mask bit -> the fields it carries (rxe_qp_from_attr copies only these)
FIELDS_BY_MASK: dict[int, tuple[str, ...]] = {
    int(M.IBV_QP_STATE): ("qp_state",),
    int(M.IBV_QP_CUR_STATE): ("cur_qp_state",),
    int(M.IBV_QP_EN_SQD_ASYNC_NOTIFY): ("en_sqd_async_notify",),
    int(M.IBV_QP_ACCESS_FLAGS): ("qp_access_flags",),
    int(M.IBV_QP_PKEY_INDEX): ("pkey_index",),
    int(M.IBV_QP_PORT): ("port_num",),
    int(M.IBV_QP_QKEY): ("qkey",),
    int(M.IBV_QP_AV): ("_ah",),
    int(M.IBV_QP_PATH_MTU): ("path_mtu",),
    int(M.IBV_QP_TIMEOUT): ("timeout",),
    int(M.IBV_QP_RETRY_CNT): ("retry_cnt",),
    int(M.IBV_QP_RNR_RETRY): ("rnr_retry",),
    int(M.IBV_QP_RQ_PSN): ("rq_psn",),
    int(M.IBV_QP_MAX_QP_RD_ATOMIC): ("max_rd_atomic",),
    int(M.IBV_QP_ALT_PATH): ("_alt_ah", "alt_pkey_index", "alt_port_num", "alt_timeout"),
    int(M.IBV_QP_MIN_RNR_TIMER): ("min_rnr_timer",),
    int(M.IBV_QP_SQ_PSN): ("sq_psn",),
    int(M.IBV_QP_MAX_DEST_RD_ATOMIC): ("max_dest_rd_atomic",),
    int(M.IBV_QP_PATH_MIG_STATE): ("path_mig_state",),
    int(M.IBV_QP_CAP): ("_cap",),
    int(M.IBV_QP_DEST_QPN): ("dest_qp_num",),
    int(M.IBV_QP_RATE_LIMIT): ("rate_limit",),
}

_RC_INIT = M.IBV_QP_STATE | M.IBV_QP_PKEY_INDEX | M.IBV_QP_PORT | M.IBV_QP_ACCESS_FLAGS
_RC_RTR = (M.IBV_QP_STATE | M.IBV_QP_AV | M.IBV_QP_PATH_MTU | M.IBV_QP_DEST_QPN |
           M.IBV_QP_RQ_PSN | M.IBV_QP_MAX_DEST_RD_ATOMIC | M.IBV_QP_MIN_RNR_TIMER)
_RC_RTS = (M.IBV_QP_STATE | M.IBV_QP_TIMEOUT | M.IBV_QP_RETRY_CNT | M.IBV_QP_RNR_RETRY |
           M.IBV_QP_SQ_PSN | M.IBV_QP_MAX_QP_RD_ATOMIC)
_UC_RTR = (M.IBV_QP_STATE | M.IBV_QP_AV | M.IBV_QP_PATH_MTU | M.IBV_QP_DEST_QPN |
           M.IBV_QP_RQ_PSN)
_UD_INIT = M.IBV_QP_STATE | M.IBV_QP_PKEY_INDEX | M.IBV_QP_PORT | M.IBV_QP_QKEY
_SQ_PSN = M.IBV_QP_STATE | M.IBV_QP_SQ_PSN

# pyverbs' _get_comp_mask: the mask to_init / to_rtr / to_rts pass, per QP type
PYVERBS_MASKS: dict[int, dict[int, int]] = {
    int(T.IBV_QPT_RC): {int(S.IBV_QPS_INIT): int(_RC_INIT), int(S.IBV_QPS_RTR): int(_RC_RTR),
                        int(S.IBV_QPS_RTS): int(_RC_RTS)},
    int(T.IBV_QPT_UC): {int(S.IBV_QPS_INIT): int(_RC_INIT), int(S.IBV_QPS_RTR): int(_UC_RTR),
                        int(S.IBV_QPS_RTS): int(_SQ_PSN)},
    int(T.IBV_QPT_UD): {int(S.IBV_QPS_INIT): int(_UD_INIT),
                        int(S.IBV_QPS_RTR): int(M.IBV_QP_STATE),
                        int(S.IBV_QPS_RTS): int(_SQ_PSN)},
    int(T.IBV_QPT_RAW_PACKET): {int(S.IBV_QPS_INIT): int(M.IBV_QP_STATE | M.IBV_QP_PORT),
                                int(S.IBV_QPS_RTR): int(M.IBV_QP_STATE),
                                int(S.IBV_QPS_RTS): int(M.IBV_QP_STATE)},
}

# ib_modify_qp_is_ok (drivers/infiniband/core/verbs.c): the attributes a transition
# requires, per QP type; a modify without them fails with EINVAL
REQUIRED_MASKS: dict[tuple[int, int], dict[int, int]] = {
    (int(S.IBV_QPS_RESET), int(S.IBV_QPS_INIT)): {
        int(T.IBV_QPT_RC): int(_RC_INIT & ~M.IBV_QP_STATE),
        int(T.IBV_QPT_UC): int(_RC_INIT & ~M.IBV_QP_STATE),
        int(T.IBV_QPT_UD): int(_UD_INIT & ~M.IBV_QP_STATE)},
    (int(S.IBV_QPS_INIT), int(S.IBV_QPS_RTR)): {
        int(T.IBV_QPT_RC): int(_RC_RTR & ~M.IBV_QP_STATE),
        int(T.IBV_QPT_UC): int(_UC_RTR & ~M.IBV_QP_STATE)},
    (int(S.IBV_QPS_RTR), int(S.IBV_QPS_RTS)): {
        int(T.IBV_QPT_RC): int(_RC_RTS & ~M.IBV_QP_STATE),
        int(T.IBV_QPT_UC): int(M.IBV_QP_SQ_PSN),
        int(T.IBV_QPT_UD): int(M.IBV_QP_SQ_PSN)},
}
