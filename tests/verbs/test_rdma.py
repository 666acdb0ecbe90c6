"""RC QPs between two nodes: real bytes, protection errors, flush (docs/mooncake-verbs.md §4.5,
§5.3)."""

from __future__ import annotations

import errno
from typing import Any

import numpy as np
import pytest

from kvreg.fakes.verbs import Fabric, PyverbsRDMAError, PyverbsUserError
from kvreg.fakes.verbs.enums import ibv_access_flags as A
from kvreg.fakes.verbs.enums import ibv_qp_attr_mask, ibv_send_flags
from kvreg.fakes.verbs.enums import ibv_qp_state as S
from kvreg.fakes.verbs.enums import ibv_wc_opcode as WO
from kvreg.fakes.verbs.enums import ibv_wc_status as ST
from kvreg.fakes.verbs.enums import ibv_wr_opcode as OP

RW_FLAGS = int(A.IBV_ACCESS_LOCAL_WRITE | A.IBV_ACCESS_REMOTE_WRITE | A.IBV_ACCESS_REMOTE_READ)
WRITE, READ, SEND = int(OP.IBV_WR_RDMA_WRITE), int(OP.IBV_WR_RDMA_READ), int(OP.IBV_WR_SEND)
LW = int(A.IBV_ACCESS_LOCAL_WRITE)

Pair = tuple[Any, Any]


def test_rdma_write_moves_real_bytes(pair: Pair) -> None:
    # §5.3: a WRITE inside both MRs succeeds; the bytes land in the peer's buffer
    a, b = pair
    src, dst = a.buffer(8192, fill=3), b.buffer(8192)
    smr, dmr = a.mr(src), b.mr(dst)
    a.qp.post_send(a.send_wr(WRITE, [a.sge(src.ctypes.data + 100, 4000, smr.lkey)],
                             rkey=dmr.rkey, remote=dst.ctypes.data + 1000))
    (wc,) = a.poll_all()
    assert (wc.status, wc.opcode, wc.byte_len) == (0, int(WO.IBV_WC_RDMA_WRITE), 4000)
    assert np.array_equal(dst[1000:5000], src[100:4100])
    assert not dst[:1000].any() and not dst[5000:].any()


def test_rdma_read_moves_real_bytes_with_gather_list(pair: Pair) -> None:
    # §4.5: several SGEs scatter a READ's bytes in order
    a, b = pair
    remote, local = b.buffer(4096, fill=9), a.buffer(4096)
    rmr, lmr = b.mr(remote), a.mr(local)
    sges = [a.sge(local.ctypes.data + 2048, 1000, lmr.lkey),
            a.sge(local.ctypes.data, 1000, lmr.lkey)]
    a.qp.post_send(a.send_wr(READ, sges, rkey=rmr.rkey, remote=remote.ctypes.data))
    (wc,) = a.poll_all()
    assert wc.status == ST.IBV_WC_SUCCESS and wc.opcode == int(WO.IBV_WC_RDMA_READ)
    assert np.array_equal(local[2048:3048], remote[:1000])
    assert np.array_equal(local[:1000], remote[1000:2000])


def test_sge_spanning_two_adjacent_mrs_is_local_protection_error_then_flush(
        pair: Pair, kit: Any) -> None:
    # §5.3: every SGE must lie inside the one MR of its lkey; spanning two adjacent MRs ->
    # IBV_WC_LOC_PROT_ERR, QP to ERR, later WRs flushed (IBV_WC_WR_FLUSH_ERR)
    a, b = pair
    src, dst = a.buffer(8192, fill=1), b.buffer(8192)
    m0, m1 = a.mr(src, length=4096), a.mr(src, offset=4096, length=4096)
    dmr = b.mr(dst)
    a.qp.post_send(a.send_wr(WRITE, [a.sge(src.ctypes.data + 4000, 200, m0.lkey)], wr_id=7,
                             rkey=dmr.rkey, remote=dst.ctypes.data))
    a.qp.post_send(a.send_wr(WRITE, [a.sge(src.ctypes.data + 4096, 10, m1.lkey)], wr_id=8,
                             rkey=dmr.rkey, remote=dst.ctypes.data))
    w7, w8 = a.poll_all()
    assert (w7.wr_id, w7.status) == (7, ST.IBV_WC_LOC_PROT_ERR)
    assert (w8.wr_id, w8.status) == (8, ST.IBV_WC_WR_FLUSH_ERR)
    assert a.qp.qp_state == S.IBV_QPS_ERR
    assert not dst.any()                       # nothing moved
    # the workaround (§5.3): one SGE per MR
    c, d = kit.make_side(a.node), kit.make_side(b.node)
    kit.connect(c, d)
    kit.connect(d, c)
    src2 = c.buffer(8192, fill=1)
    n0, n1 = c.mr(src2, length=4096), c.mr(src2, offset=4096, length=4096)
    dst2 = d.buffer(8192)
    dmr2 = d.mr(dst2)
    c.qp.post_send(c.send_wr(WRITE, [c.sge(src2.ctypes.data + 4000, 96, n0.lkey),
                                     c.sge(src2.ctypes.data + 4096, 104, n1.lkey)],
                             rkey=dmr2.rkey, remote=dst2.ctypes.data))
    assert [w.status for w in c.poll_all()] == [0]
    assert np.array_equal(dst2[:200], src2[4000:4200])


@pytest.mark.parametrize("case", ["outside", "no_remote_write", "stale_rkey", "wrong_node_key"])
def test_remote_range_or_access_violation_is_remote_access_error(pair: Pair,
                                                                 case: str) -> None:
    # §5.3: remote [addr, addr+len) outside the rkey's MR, or without REMOTE_WRITE ->
    # IBV_WC_REM_ACCESS_ERR (10); the requester QP goes to ERR
    a, b = pair
    src, dst = a.buffer(4096, fill=2), b.buffer(8192)
    smr = a.mr(src)
    if case == "no_remote_write":
        dmr = b.mr(dst, access=LW | int(A.IBV_ACCESS_REMOTE_READ))
        rkey, remote = dmr.rkey, dst.ctypes.data
    elif case == "outside":
        dmr = b.mr(dst, length=4096)
        rkey, remote = dmr.rkey, dst.ctypes.data + 2048     # ends 2048 bytes past the MR
    elif case == "stale_rkey":
        dmr = b.mr(dst)
        rkey, remote = dmr.rkey, dst.ctypes.data
        dmr.close()
    else:                                   # a key of the requester's own MR
        rkey, remote = smr.rkey, dst.ctypes.data
    a.qp.post_send(a.send_wr(WRITE, [a.sge(src.ctypes.data, 4096, smr.lkey)], rkey=rkey,
                             remote=remote))
    (wc,) = a.poll_all()
    assert wc.status == ST.IBV_WC_REM_ACCESS_ERR
    assert a.qp.qp_state == S.IBV_QPS_ERR
    assert not dst.any()


def test_read_needs_remote_read_and_local_write(pair: Pair) -> None:
    # §5.3: READ without REMOTE_READ on the remote MR -> REM_ACCESS_ERR
    a, b = pair
    remote, local = b.buffer(4096, fill=5), a.buffer(4096)
    rmr = b.mr(remote, access=LW | int(A.IBV_ACCESS_REMOTE_WRITE))
    lmr = a.mr(local)
    a.qp.post_send(a.send_wr(READ, [a.sge(local.ctypes.data, 64, lmr.lkey)], rkey=rmr.rkey,
                             remote=remote.ctypes.data))
    assert [w.status for w in a.poll_all()] == [ST.IBV_WC_REM_ACCESS_ERR]
    assert not local.any()


def test_lkey_of_another_pd_is_local_protection_error(pair: Pair) -> None:
    # §5.3: the lkey must name an MR this QP may use (same PD)
    a, b = pair
    other_pd = a.mods["pyverbs.pd"].PD(a.ctx)
    src, dst = a.buffer(4096, fill=4), b.buffer(4096)
    foreign = a.mods["pyverbs.mr"].MR(other_pd, 4096, LW, address=src.ctypes.data)
    dmr = b.mr(dst)
    a.qp.post_send(a.send_wr(WRITE, [a.sge(src.ctypes.data, 16, foreign.lkey)],
                             rkey=dmr.rkey, remote=dst.ctypes.data))
    assert [w.status for w in a.poll_all()] == [ST.IBV_WC_LOC_PROT_ERR]


def test_unsignaled_success_makes_no_completion(fabric: Fabric, kit: Any) -> None:
    # §4.6 send flags: without SIGNALED (and sq_sig_all=0) a successful WR is silent;
    # errors always complete
    a = kit.make_side(fabric.node("a"), sq_sig_all=0)
    b = kit.make_side(fabric.node("b"))
    kit.connect(a, b)
    kit.connect(b, a)
    src, dst = a.buffer(4096, fill=6), b.buffer(4096)
    smr, dmr = a.mr(src), b.mr(dst)
    a.qp.post_send(a.send_wr(WRITE, [a.sge(src.ctypes.data, 100, smr.lkey)], rkey=dmr.rkey,
                             remote=dst.ctypes.data, flags=0))
    assert a.poll_all() == []
    assert np.array_equal(dst[:100], src[:100])
    a.qp.post_send(a.send_wr(WRITE, [a.sge(src.ctypes.data, 100, smr.lkey + 999)],
                             rkey=dmr.rkey, remote=dst.ctypes.data, flags=0))
    assert [w.status for w in a.poll_all()] == [ST.IBV_WC_LOC_PROT_ERR]


def test_post_send_immediate_errors(fabric: Fabric, kit: Any) -> None:
    # §4.5: immediate post errors: EINVAL (state / bad WR), ENOMEM (queue full)
    a = kit.make_side(fabric.node("a"), max_send_wr=2)
    b = kit.make_side(fabric.node("b"))
    src = a.buffer(4096)
    smr = a.mr(src)
    wr = a.send_wr(WRITE, [a.sge(src.ctypes.data, 8, smr.lkey)], rkey=1, remote=1)
    with pytest.raises(PyverbsRDMAError, match="Failed to post send") as info:
        a.qp.post_send(wr)                     # QP still in INIT
    assert info.value.error_code == errno.EINVAL
    kit.connect(a, b)
    kit.connect(b, a)
    dst = b.buffer(4096)
    dmr = b.mr(dst)
    ok = a.send_wr(WRITE, [a.sge(src.ctypes.data, 8, smr.lkey)], rkey=dmr.rkey,
                   remote=dst.ctypes.data)
    a.qp.post_send(ok)
    a.qp.post_send(ok)
    with pytest.raises(PyverbsRDMAError) as info:
        a.qp.post_send(ok)                     # two completions not yet polled
    assert info.value.error_code == errno.ENOMEM
    assert len(a.poll_all()) == 2
    a.qp.post_send(ok)                         # polling freed the slots
    five = a.send_wr(WRITE, [a.sge(src.ctypes.data, 8, smr.lkey)] * 5, rkey=dmr.rkey,
                     remote=dst.ctypes.data)
    with pytest.raises(PyverbsRDMAError) as info:
        a.qp.post_send(five)                   # more SGEs than max_send_sge
    assert info.value.error_code == errno.EINVAL


def test_wr_without_sge_and_sge_length_limits() -> None:
    # §4.5: 'A WR needs at least one SGE'; SGE length is a uint32 (< 4 GiB)
    from kvreg.fakes.verbs.wr import SGE, RecvWR, SendWR

    with pytest.raises(PyverbsUserError, match="A WR needs at least one SGE"):
        SendWR(opcode=WRITE)
    with pytest.raises(PyverbsUserError, match="A WR needs at least one SGE"):
        RecvWR()
    SendWR(opcode=int(OP.IBV_WR_LOCAL_INV))   # no SGE needed
    with pytest.raises(OverflowError):
        SGE(0x1000, 1 << 32, 1)
    assert SGE(0x1000, (1 << 32) - 1, 1).length == (1 << 32) - 1


def test_illegal_state_transitions_are_einval(fabric: Fabric, kit: Any) -> None:
    # IB state diagram: RESET->INIT->RTR->RTS; RTS->RTR is illegal; any->RESET/ERR is legal
    a = kit.make_side(fabric.node("a"))
    b = kit.make_side(fabric.node("b"))
    assert a.qp.qp_state == S.IBV_QPS_INIT       # pyverbs stops RC QPs in INIT
    kit.connect(a, b)
    assert a.qp.qp_state == S.IBV_QPS_RTS
    Q = a.mods["pyverbs.qp"]
    attr = Q.QPAttr(qp_state=int(S.IBV_QPS_RTR))
    with pytest.raises(PyverbsRDMAError) as info:
        a.qp.modify(attr, 1)
    assert info.value.error_code == errno.EINVAL
    with pytest.raises(PyverbsRDMAError, match="Failed to modify QP state to init"):
        a.qp.to_rtr(Q.QPAttr())                  # pyverbs walks RTS -> INIT first: illegal
    a.qp.modify(Q.QPAttr(qp_state=int(S.IBV_QPS_ERR)), 1)
    assert a.qp.qp_state == S.IBV_QPS_ERR
    a.qp.modify(Q.QPAttr(qp_state=int(S.IBV_QPS_RESET)), 1)
    a.qp.to_init(Q.QPAttr())
    kit.connect(a, b)                            # usable again after RESET
    assert a.qp.qp_state == S.IBV_QPS_RTS


def test_unconnected_peer_is_retry_exceeded(fabric: Fabric, kit: Any) -> None:
    # [inferred] nobody answers: the requester's retries run out (IBV_WC_RETRY_EXC_ERR)
    a = kit.make_side(fabric.node("a"))
    b = kit.make_side(fabric.node("b"))
    kit.connect(a, b)                            # b never moves to RTR
    src = a.buffer(4096)
    smr = a.mr(src)
    a.qp.post_send(a.send_wr(WRITE, [a.sge(src.ctypes.data, 8, smr.lkey)], rkey=1, remote=1))
    assert [w.status for w in a.poll_all()] == [ST.IBV_WC_RETRY_EXC_ERR]


def test_send_recv_moves_bytes_and_rnr_without_receive(pair: Pair) -> None:
    # SEND consumes a posted receive; without one the sender gets RNR_RETRY_EXC_ERR
    a, b = pair
    src, dst = a.buffer(4096, fill=8), b.buffer(4096)
    smr, dmr = a.mr(src), b.mr(dst)
    W = b.mods["pyverbs.wr"]
    b.qp.post_recv(W.RecvWR(wr_id=33, num_sge=1, sg=[b.sge(dst.ctypes.data, 4096, dmr.lkey)]))
    a.qp.post_send(a.send_wr(SEND, [a.sge(src.ctypes.data, 300, smr.lkey)]))
    assert [w.status for w in a.poll_all()] == [0]
    (rwc,) = b.poll_all()
    assert (rwc.wr_id, rwc.status, rwc.opcode, rwc.byte_len) == (33, 0, int(WO.IBV_WC_RECV),
                                                                 300)
    assert np.array_equal(dst[:300], src[:300])
    a.qp.post_send(a.send_wr(SEND, [a.sge(src.ctypes.data, 300, smr.lkey)]))
    assert [w.status for w in a.poll_all()] == [ST.IBV_WC_RNR_RETRY_EXC_ERR]


def test_error_flushes_posted_receives(pair: Pair) -> None:
    # §5.3: a QP in error flushes its outstanding work with IBV_WC_WR_FLUSH_ERR
    a, _b = pair
    buf = a.buffer(4096)
    mr = a.mr(buf)
    W = a.mods["pyverbs.wr"]
    a.qp.post_recv(W.RecvWR(wr_id=5, num_sge=1, sg=[a.sge(buf.ctypes.data, 64, mr.lkey)]))
    a.qp.post_send(a.send_wr(WRITE, [a.sge(buf.ctypes.data, 8, mr.lkey + 1)], rkey=1,
                             remote=1))
    # the failing WR's own completion comes first, then the flushes (one CQ for both queues)
    statuses = [(w.wr_id, w.status) for w in a.poll_all()]
    assert statuses == [(1, ST.IBV_WC_LOC_PROT_ERR), (5, ST.IBV_WC_WR_FLUSH_ERR)]


def test_failed_send_completes_before_the_flushes(pair: Pair) -> None:
    # rdma-core tests/test_mr.py::test_mr_rereg_pd: the responder's receive buffer is no
    # longer in its QP's PD, the SEND fails "Remote operation error", and the requester's CQ
    # (shared by both its queues, as in rdma-core's RCResources) gives that error before the
    # flush of the requester's own posted receive; the responder sees its LOC_PROT_ERR
    a, b = pair
    W = a.mods["pyverbs.wr"]
    abuf, bbuf = a.buffer(4096), b.buffer(4096)
    amr = a.mr(abuf)
    b.mr(bbuf)                                        # the buffer's MR in b's own PD
    other_pd = b.mods["pyverbs.pd"].PD(b.ctx)
    stray = b.mods["pyverbs.mr"].MR(other_pd, 4096, RW_FLAGS, address=bbuf.ctypes.data)
    b.qp.post_recv(W.RecvWR(wr_id=7, num_sge=1, sg=[b.sge(bbuf.ctypes.data, 64, stray.lkey)]))
    a.qp.post_recv(W.RecvWR(wr_id=5, num_sge=1, sg=[a.sge(abuf.ctypes.data, 64, amr.lkey)]))
    a.qp.post_send(a.send_wr(SEND, [a.sge(abuf.ctypes.data, 64, amr.lkey)], wr_id=1))
    assert [(w.wr_id, w.status, w.opcode) for w in a.poll_all()] == [
        (1, ST.IBV_WC_REM_OP_ERR, int(WO.IBV_WC_SEND)),
        (5, ST.IBV_WC_WR_FLUSH_ERR, int(WO.IBV_WC_RECV))]
    assert [(w.wr_id, w.status) for w in b.poll_all()] == [(7, ST.IBV_WC_LOC_PROT_ERR)]
    assert a.qp.qp_state == b.qp.qp_state == S.IBV_QPS_ERR


def test_virtual_ranges_pass_checks_but_move_no_bytes(pair: Pair) -> None:
    # registration-only use: protection still applies; success moves nothing
    a, b = pair
    vsrc = a.node.virtual(1 << 30, name="vpool")
    dst = b.buffer(4096)
    vmr = a.mods["pyverbs.mr"].MR(a.pd, 1 << 30, LW, address=vsrc.data_ptr())
    dmr = b.mr(dst)
    a.qp.post_send(a.send_wr(WRITE, [a.sge(vsrc.data_ptr() + 12345, 4096, vmr.lkey)],
                             rkey=dmr.rkey, remote=dst.ctypes.data))
    assert [w.status for w in a.poll_all()] == [0]
    assert not dst.any()
    assert a.node.fabric.trace.calls("wr.rdma_write")[-1].result == {"data": False}
    a.qp.post_send(a.send_wr(WRITE, [a.sge(vsrc.data_ptr() + (1 << 30) - 8, 16, vmr.lkey)],
                             rkey=dmr.rkey, remote=dst.ctypes.data))
    assert [w.status for w in a.poll_all()] == [ST.IBV_WC_LOC_PROT_ERR]


def test_ib_lid_addressing_and_signaled_flag(fabric: Fabric, kit: Any) -> None:
    # a non-global AH names the peer port by LID (InfiniBand)
    a = kit.make_side(fabric.node("a"), sq_sig_all=0)
    b = kit.make_side(fabric.node("b"))
    Q, Ad = a.mods["pyverbs.qp"], a.mods["pyverbs.addr"]
    for x, y in ((a, b), (b, a)):
        attr = Q.QPAttr()
        attr.qp_access_flags = kit.RW
        attr.dest_qp_num = y.qp.qp_num
        attr.ah_attr = Ad.AHAttr(dlid=y.ctx.query_port(1).lid)
        x.qp.to_rts(attr)
    src, dst = a.buffer(64, fill=1), b.buffer(64)
    smr, dmr = a.mr(src), b.mr(dst)
    a.qp.post_send(a.send_wr(WRITE, [a.sge(src.ctypes.data, 64, smr.lkey)], rkey=dmr.rkey,
                             remote=dst.ctypes.data,
                             flags=int(ibv_send_flags.IBV_SEND_SIGNALED)))
    assert [w.status for w in a.poll_all()] == [0]
    assert np.array_equal(dst, src)


def test_reset_drops_the_qps_unpolled_completions(pair: Pair) -> None:
    # rdma-core tests/test_mr.py::test_mr_rereg_pd stops polling at the error, restates the QP
    # (RESET, INIT, RTR, RTS) and expects the next traffic's completions first: moving a QP to
    # RESET cleans its entries from its CQs (providers/mlx5/verbs.c mlx5_modify_qp calls
    # mlx5_cq_clean); another QP's completions on the same CQ stay
    a, b = pair
    W, Q = a.mods["pyverbs.wr"], a.mods["pyverbs.qp"]
    buf = a.buffer(4096)
    mr = a.mr(buf)
    a.qp.post_recv(W.RecvWR(wr_id=5, num_sge=1, sg=[a.sge(buf.ctypes.data, 64, mr.lkey)]))
    a.qp.post_send(a.send_wr(WRITE, [a.sge(buf.ctypes.data, 8, mr.lkey + 1)], rkey=1,
                             remote=1))
    n, first = a.cq.poll(1)
    assert n == 1 and first[0].status == ST.IBV_WC_LOC_PROT_ERR
    other = a.mods["pyverbs.cq"].WC(wr_id=77, qp_num=a.qp.qp_num + 1000)
    a.cq.push(other)
    assert len(a.cq) == 2                        # the recv's flush, and the other QP's entry
    attr = Q.QPAttr()
    attr.qp_state = int(S.IBV_QPS_RESET)
    a.qp.modify(attr, int(ibv_qp_attr_mask.IBV_QP_STATE))
    assert a.qp.qp_state == S.IBV_QPS_RESET
    assert [w.wr_id for w in a.poll_all()] == [77]
    assert b.poll_all() == []
