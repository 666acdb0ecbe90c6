"""Executing a send WR on an RC QP: protection checks, then real bytes (§5.3).

Order of checks, and the completion status each failure gives:

1. QP already in ERR → ``IBV_WC_WR_FLUSH_ERR`` (5), always reported (§5.3).
2. A fault rule on ``verbs.completion`` fires → that status.
3. Every local SGE lies inside the one MR its lkey names, of this QP's PD (and, for an RDMA
   READ, that MR has LOCAL_WRITE) → else ``IBV_WC_LOC_PROT_ERR`` (4) (§5.3, rxe's
   ``mr_check_range``). An SGE that spans two adjacent MRs fails here.
4. The peer QP exists (by the AH's GID or LID and the dest QPN), is connected back to this
   QP and is in RTR/RTS → else ``IBV_WC_RETRY_EXC_ERR`` (12) [inferred: nobody answers].
5. RDMA WRITE/READ, in the responder's order (rxe_resp.c): the peer QP's
   ``qp_access_flags`` allow the operation (``check_op_valid``) → else the profile's
   status (rxe: ``IBV_WC_REM_INV_REQ_ERR`` (9), a NAK "invalid request"); a READ finds
   responder resources, ``max_dest_rd_atomic`` > 0 (``check_resource``) → else
   ``IBV_WC_REM_INV_REQ_ERR``; the remote range lies inside the MR named by rkey, of the
   peer's PD, with REMOTE_WRITE/REMOTE_READ (``check_rkey``) → else
   ``IBV_WC_REM_ACCESS_ERR`` (10) (§5.3). A READ on a QP whose own ``max_rd_atomic`` is 0
   never starts (rxe_req.c ``check_init_depth``; see ``QP.post_send``).
6. SEND: the peer has a receive posted → else ``IBV_WC_RNR_RETRY_EXC_ERR`` (13); its SGEs are
   checked like (3) on the peer [inferred from IB semantics].

Any error puts this QP in ERR; WRs posted later flush. On success the bytes move with
``ctypes.memmove`` between the registered ranges, tracked buffers and ordinary process
memory alike; a virtual range anywhere in the WR moves nothing (the WR still succeeds; the
trace row says ``data=False``), see :mod:`.memory`.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from ..address_space import AddressSpace
from . import enums as V
from .cq import WC
from .errors import NotModelledError
from .memory import classify, copy, require
from .wr import SGE, SendWR

if TYPE_CHECKING:
    from .node import Nic

__all__ = ["execute_send"]

St = V.ibv_wc_status
Op = V.ibv_wr_opcode
F = V.ibv_access_flags

_WC_OPCODE = {int(Op.IBV_WR_RDMA_WRITE): int(V.ibv_wc_opcode.IBV_WC_RDMA_WRITE),
              int(Op.IBV_WR_RDMA_READ): int(V.ibv_wc_opcode.IBV_WC_RDMA_READ),
              int(Op.IBV_WR_SEND): int(V.ibv_wc_opcode.IBV_WC_SEND)}
_NAMES = {int(Op.IBV_WR_RDMA_WRITE): "rdma_write", int(Op.IBV_WR_RDMA_READ): "rdma_read",
          int(Op.IBV_WR_SEND): "send"}



class QP(Protocol):
    """What the data path needs of a queue pair (``pyverbs.qp.QP`` provides it)."""

    attr: Any
    sq_sig_all: bool
    rcq: Any

    @property
    def nic(self) -> Nic: ...

    @property
    def qp_num(self) -> int: ...

    @property
    def qp_state(self) -> int: ...

    @property
    def closed(self) -> bool: ...

    @property
    def pd(self) -> Any: ...

    def set_error(self) -> None: ...

    def pop_recv(self) -> Any: ...


Segment = tuple[AddressSpace, int, int]
Done = Callable[..., "WC | None"]


def _local_ok(nic: Nic, pd_id: int, sges: list[SGE], need: int) -> bool:
    for sge in sges:
        rec = nic.mr_by_key(sge.lkey)
        if rec is None or rec.pd_id != pd_id or not rec.contains(sge.addr, sge.length) \
                or rec.invalidated():
            return False
        if need and not rec.access & need:
            return False
    return True


def _segments(nic: Nic, sges: list[SGE]) -> list[Segment]:
    """Where the process sees each SGE's bytes: its address, or for an MR over a dma-buf
    with bytes the dma-buf's mapping at the SGE's iova (docs/mooncake-verbs.md §5.6)."""
    out = []
    for s in sges:
        rec = nic.mr_by_key(s.lkey)
        out.append((nic.node.space, s.addr + (rec.host_delta if rec else 0), s.length))
    return out


def _peer(qp: QP) -> QP | None:
    ah = qp.attr.ah_attr
    hit = qp.nic.node.fabric.find_port(lid=ah.dlid, gid=ah.dgid if ah.is_global else None)
    if hit is None:
        return None
    peer: QP | None = hit[0].qps.get(qp.attr.dest_qp_num)
    if peer is None or peer.closed or peer.attr.dest_qp_num != qp.qp_num:
        return None
    if peer.qp_state not in (V.ibv_qp_state.IBV_QPS_RTR, V.ibv_qp_state.IBV_QPS_RTS):
        return None
    return peer


def _move(dst: list[Segment], src: list[Segment]) -> bool:
    """Scatter the gathered ``src`` into ``dst``; False (nothing moved) if any side is virtual.

    Registered process memory (tracked or not) is read and written in place (§5.2).
    """
    kinds = [(seg, classify(seg[0], seg[1], seg[2], write=True)) for seg in dst if seg[2]]
    kinds += [(seg, classify(seg[0], seg[1], seg[2])) for seg in src if seg[2]]
    for (space, ptr, n), kind in kinds:
        require(kind, space, ptr, n, "RDMA")
    if any(kind == "virtual" for _, kind in kinds):
        return False
    paged = any(kind == "device" for _, kind in kinds)    # bytes through the page store
    di = si = 0
    doff = soff = 0
    while di < len(dst) and si < len(src):
        dspace, dptr, dlen = dst[di]
        sspace, sptr, slen = src[si]
        n = min(dlen - doff, slen - soff)
        if n and paged:
            copy(dspace, dptr + doff, sspace, sptr + soff, n)
        elif n:
            ctypes.memmove(dptr + doff, sptr + soff, n)
        doff += n
        soff += n
        if doff == dlen:
            di, doff = di + 1, 0
        if soff == slen:
            si, soff = si + 1, 0
    return True


def execute_send(qp: QP, wr: SendWR) -> WC | None:
    """Run one WR; the completion to queue, or None for an unsignaled success."""
    nic = qp.nic
    fabric = nic.node.fabric
    opcode = wr.opcode
    if opcode not in _NAMES:
        raise NotModelledError(f"kvreg's fake pyverbs executes RDMA WRITE, RDMA READ and "
                               f"SEND only, not opcode {opcode}")
    sges = wr.sg_list
    total = sum(s.length for s in sges)
    api = f"wr.{_NAMES[opcode]}"
    args = (sges[0].addr if sges else 0, total, wr.remote_addr, wr.rkey)
    signaled = qp.sq_sig_all or bool(wr.send_flags & V.ibv_send_flags.IBV_SEND_SIGNALED)

    def done(status: int, *, injected: bool = False, data: bool = False) -> WC | None:
        fabric.trace.append(nic.face, api, args, status, {"data": data}, injected)
        if status != St.IBV_WC_SUCCESS:
            # the caller queues this completion, then moves the QP to ERR (flushes after it)
            return WC(wr_id=wr.wr_id, status=status, opcode=_WC_OPCODE[opcode],
                      qp_num=qp.qp_num)
        if not signaled:
            return None
        return WC(wr_id=wr.wr_id, status=status, opcode=_WC_OPCODE[opcode],
                  byte_len=total, qp_num=qp.qp_num)

    if qp.qp_state == V.ibv_qp_state.IBV_QPS_ERR:
        return done(int(St.IBV_WC_WR_FLUSH_ERR))
    injected = fabric.check_fault("verbs.completion", nic.face, api, args, nic.node)
    if injected is not None:
        return done(injected, injected=True)
    need = int(F.IBV_ACCESS_LOCAL_WRITE) if opcode == Op.IBV_WR_RDMA_READ else 0
    if not _local_ok(nic, qp.pd.pd_id, sges, need):
        return done(int(St.IBV_WC_LOC_PROT_ERR))
    peer = _peer(qp)
    if peer is None:
        return done(int(St.IBV_WC_RETRY_EXC_ERR))
    local = _segments(nic, sges)
    pspace = peer.nic.node.space
    if opcode == Op.IBV_WR_SEND:
        return _send(qp, peer, wr, local, total, done)
    want = F.IBV_ACCESS_REMOTE_WRITE if opcode == Op.IBV_WR_RDMA_WRITE else \
        F.IBV_ACCESS_REMOTE_READ
    # rxe_resp.c check_op_valid: the responder QP must allow the operation
    # (qp_access_flags), else it NAKs before looking at any key
    if not peer.attr.qp_access_flags & want:
        return done(int(peer.nic.profile.qp_access_violation_status))
    # rxe_resp.c check_resource: a READ needs responder resources (max_dest_rd_atomic);
    # with none the responder NAKs "invalid request"
    if opcode == Op.IBV_WR_RDMA_READ and peer.attr.max_dest_rd_atomic == 0:
        return done(int(St.IBV_WC_REM_INV_REQ_ERR))
    rec = peer.nic.mr_by_key(wr.rkey)
    if rec is None or rec.pd_id != peer.pd.pd_id or not rec.contains(wr.remote_addr, total) \
            or not rec.access & want or rec.invalidated():
        return done(int(St.IBV_WC_REM_ACCESS_ERR))
    remote = [(pspace, wr.remote_addr + rec.host_delta, total)]
    moved = _move(remote, local) if opcode == Op.IBV_WR_RDMA_WRITE else _move(local, remote)
    return done(int(St.IBV_WC_SUCCESS), data=moved)


def _send(qp: QP, peer: QP, wr: SendWR, local: list[Segment], total: int,
          finish: Done) -> WC | None:
    rwr = peer.pop_recv()
    if rwr is None:
        return finish(int(St.IBV_WC_RNR_RETRY_EXC_ERR))
    rsges = rwr.sg_list
    recv_wc = WC(wr_id=rwr.wr_id, opcode=int(V.ibv_wc_opcode.IBV_WC_RECV), qp_num=peer.qp_num,
                 src_qp=qp.qp_num)
    if not _local_ok(peer.nic, peer.pd.pd_id, rsges, int(F.IBV_ACCESS_LOCAL_WRITE)):
        recv_wc.status = int(St.IBV_WC_LOC_PROT_ERR)
        peer.rcq.push(recv_wc)
        peer.set_error()
        return finish(int(St.IBV_WC_REM_OP_ERR))
    if sum(s.length for s in rsges) < total:
        recv_wc.status = int(St.IBV_WC_LOC_LEN_ERR)
        peer.rcq.push(recv_wc)
        peer.set_error()
        return finish(int(St.IBV_WC_REM_INV_REQ_ERR))
    moved = _move(_segments(peer.nic, rsges), local)
    recv_wc.byte_len = total
    peer.rcq.push(recv_wc)
    return finish(int(St.IBV_WC_SUCCESS), data=moved)
