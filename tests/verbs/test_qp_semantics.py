"""QP semantics a transfer engine depends on, as the kernel and rdma-core give them.

Sources (drivers/infiniband/sw/rxe unless noted): ``rxe_resp.c`` ``check_op_valid``
(responder QP access flags), ``check_resource`` (READ needs max_dest_rd_atomic),
``check_rkey`` (MR range and access → remote access error); ``rxe_req.c``
``check_init_depth`` (a READ needs max_rd_atomic); ``rxe_qp.c`` ``rxe_qp_from_attr``
(only masked fields change), ``rxe_qp_chk_cap`` / ``rxe_qp_chk_init`` (caps and QP types
at creation); core ``verbs.c`` ``ib_modify_qp_is_ok`` (required attributes);
``uverbs_cmd.c`` create_cq (comp_vector < num_comp_vectors); pyverbs ``QP.query`` (a
fresh ``QPAttr``), ``_get_comp_mask`` (UD INIT carries QKEY), ``QPInitAttr`` (max_* write
``cap``). docs/mooncake-verbs.md §4.5, §5.3.
"""

from __future__ import annotations

import errno
import itertools
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvreg.fakes.verbs import Fabric, PyverbsRDMAError
from kvreg.fakes.verbs.enums import ibv_access_flags as A
from kvreg.fakes.verbs.enums import ibv_qp_attr_mask as M
from kvreg.fakes.verbs.enums import ibv_qp_state as S
from kvreg.fakes.verbs.enums import ibv_qp_type as T
from kvreg.fakes.verbs.enums import ibv_wc_status as ST
from kvreg.fakes.verbs.enums import ibv_wr_opcode as OP

Pair = tuple[Any, Any]
LW, RWR, RRD = (int(A.IBV_ACCESS_LOCAL_WRITE), int(A.IBV_ACCESS_REMOTE_WRITE),
                int(A.IBV_ACCESS_REMOTE_READ))
RW = LW | RWR | RRD


def _two(profile: str) -> Fabric:
    f = Fabric(("a", "b"))
    f.add_device("nic0", profile, node="a")
    f.add_device("nic0", profile, node="b")
    return f


def _oracle(profile: str, op: int, mr_access: int, qp_access: int, state: int) -> int:
    """The requester's completion status, in the responder's order of checks."""
    if state not in (S.IBV_QPS_RTR, S.IBV_QPS_RTS):
        return int(ST.IBV_WC_RETRY_EXC_ERR)            # nobody answers
    want = RWR if op == OP.IBV_WR_RDMA_WRITE else RRD
    if not qp_access & want:                            # check_op_valid
        return 9 if profile == "rxe" else 10
    if not mr_access & want:                            # check_rkey
        return int(ST.IBV_WC_REM_ACCESS_ERR)
    return 0


@pytest.mark.parametrize("profile", ["mlx5", "rxe"])
@pytest.mark.parametrize("op", [OP.IBV_WR_RDMA_WRITE, OP.IBV_WR_RDMA_READ])
def test_rc_matrix_mr_access_by_responder_qp_access_by_state(kit: Any, profile: str,
                                                             op: int) -> None:
    mr_accesses = [LW, LW | RWR, LW | RRD, RW]
    qp_accesses = [0, RWR, RRD, RWR | RRD]
    states = [int(S.IBV_QPS_INIT), int(S.IBV_QPS_RTR), int(S.IBV_QPS_RTS)]
    for mr_access, qp_access, state in itertools.product(mr_accesses, qp_accesses, states):
        f = _two(profile)
        a = kit.make_side(f.node("a"), "nic0")
        b = kit.make_side(f.node("b"), "nic0", access=qp_access)
        kit.connect(a, b)
        if state != S.IBV_QPS_INIT:
            kit.connect(b, a, access=qp_access)
        if state == S.IBV_QPS_RTR:
            Q = b.mods["pyverbs.qp"]
            b.qp.modify(Q.QPAttr(qp_state=int(S.IBV_QPS_RESET)), int(M.IBV_QP_STATE))
            attr = Q.QPAttr()
            attr.qp_access_flags = qp_access
            attr.max_dest_rd_atomic = 1
            attr.dest_qp_num = a.qp.qp_num
            Ad = b.mods["pyverbs.addr"]
            attr.ah_attr = Ad.AHAttr(is_global=1, gr=Ad.GlobalRoute(
                dgid=a.ctx.query_gid(1, 0)), port_num=1)
            b.qp.to_rtr(attr)
        assert b.qp.qp_state == state
        local, remote = a.buffer(64, fill=5), b.buffer(64, fill=9)
        lmr, rmr = a.mr(local), b.mr(remote, access=mr_access)
        before = (local.copy(), remote.copy())
        a.qp.post_send(a.send_wr(op, [a.sge(local.ctypes.data, 64, lmr.lkey)],
                                 rkey=rmr.rkey, remote=remote.ctypes.data))
        got = [w.status for w in a.poll_all()]
        want = _oracle(profile, op, mr_access, qp_access, state)
        assert got == [want], (profile, op, hex(mr_access), hex(qp_access), state)
        if want == 0:
            assert np.array_equal(local, remote)
        else:                                           # nothing moved on a failure
            assert np.array_equal(local, before[0]) and np.array_equal(remote, before[1])


def test_read_needs_responder_resources(pair: Pair) -> None:
    # rxe_resp.c check_resource: max_dest_rd_atomic 0 -> NAK invalid request (9)
    a, b = pair
    Q, Ad = b.mods["pyverbs.qp"], b.mods["pyverbs.addr"]
    b.qp.modify(Q.QPAttr(qp_state=int(S.IBV_QPS_RESET)), int(M.IBV_QP_STATE))
    attr = Q.QPAttr()
    attr.qp_access_flags = RW
    attr.max_rd_atomic, attr.max_dest_rd_atomic = 1, 0
    attr.dest_qp_num = a.qp.qp_num
    attr.ah_attr = Ad.AHAttr(is_global=1, gr=Ad.GlobalRoute(dgid=a.ctx.query_gid(1, 0)),
                             port_num=1)
    b.qp.to_rts(attr)
    src, dst = b.buffer(32, fill=1), a.buffer(32)
    smr, dmr = b.mr(src), a.mr(dst)
    a.qp.post_send(a.send_wr(OP.IBV_WR_RDMA_READ, [a.sge(dst.ctypes.data, 32, dmr.lkey)],
                             rkey=smr.rkey, remote=src.ctypes.data))
    assert [w.status for w in a.poll_all()] == [ST.IBV_WC_REM_INV_REQ_ERR]
    assert not dst.any()
    # a WRITE needs no responder resources
    a.qp.modify(Q.QPAttr(qp_state=int(S.IBV_QPS_RESET)), int(M.IBV_QP_STATE))
    back = Q.QPAttr()
    back.qp_access_flags = RW
    back.max_rd_atomic = back.max_dest_rd_atomic = 1
    back.dest_qp_num = b.qp.qp_num
    back.ah_attr = Ad.AHAttr(is_global=1, gr=Ad.GlobalRoute(dgid=b.ctx.query_gid(1, 0)),
                             port_num=1)
    a.qp.to_rts(back)
    a.qp.post_send(a.send_wr(OP.IBV_WR_RDMA_WRITE, [a.sge(dst.ctypes.data, 32, dmr.lkey)],
                             rkey=smr.rkey, remote=src.ctypes.data))
    assert [w.status for w in a.poll_all()] == [0]


def test_read_without_initiator_depth_stalls_until_flushed(fabric: Fabric, kit: Any) -> None:
    # rxe_req.c check_init_depth: max_rd_atomic 0 -> the READ waits for a credit forever
    a, b = kit.make_side(fabric.node("a")), kit.make_side(fabric.node("b"))
    Q = a.mods["pyverbs.qp"]
    for x, y, depth in ((a, b, 0), (b, a, 1)):
        attr = Q.QPAttr()
        attr.qp_access_flags = RW
        attr.max_rd_atomic, attr.max_dest_rd_atomic = depth, 1
        attr.dest_qp_num = y.qp.qp_num
        Ad = x.mods["pyverbs.addr"]
        attr.ah_attr = Ad.AHAttr(is_global=1, gr=Ad.GlobalRoute(dgid=y.ctx.query_gid(1, 0)),
                                 port_num=1)
        x.qp.to_rts(attr)
    src, dst = b.buffer(32, fill=1), a.buffer(32)
    smr, dmr = b.mr(src), a.mr(dst)
    read = a.send_wr(OP.IBV_WR_RDMA_READ, [a.sge(dst.ctypes.data, 32, dmr.lkey)],
                     rkey=smr.rkey, remote=src.ctypes.data, wr_id=77)
    a.qp.post_send(read)
    assert a.poll_all() == [] and not dst.any()
    a.qp.modify(Q.QPAttr(qp_state=int(S.IBV_QPS_ERR)), int(M.IBV_QP_STATE))
    assert [(w.wr_id, w.status) for w in a.poll_all()] == [(77, ST.IBV_WC_WR_FLUSH_ERR)]


def test_modify_applies_only_masked_fields(pair: Pair) -> None:
    # rxe_qp_from_attr: a state-only modify keeps dest_qp_num and the address vector
    a, b = pair
    Q = a.mods["pyverbs.qp"]
    before, _ = a.qp.query(0x1FFFFF)
    a.qp.modify(Q.QPAttr(qp_state=int(S.IBV_QPS_RTS)), int(M.IBV_QP_STATE))
    after, _ = a.qp.query(0x1FFFFF)
    assert after.dest_qp_num == b.qp.qp_num == before.dest_qp_num
    assert after.ah_attr.dgid == before.ah_attr.dgid is not None
    assert after.qp_access_flags == RW
    only = Q.QPAttr(qp_state=int(S.IBV_QPS_RTS))
    only.qp_access_flags = RWR
    only.dest_qp_num = 0xDEAD                       # not in the mask: ignored
    a.qp.modify(only, int(M.IBV_QP_STATE | M.IBV_QP_ACCESS_FLAGS))
    now, _ = a.qp.query(0)
    assert (now.qp_access_flags, now.dest_qp_num) == (RWR, b.qp.qp_num)
    src, dst = a.buffer(16, fill=2), b.buffer(16)
    smr, dmr = a.mr(src), b.mr(dst)
    a.qp.post_send(a.send_wr(OP.IBV_WR_RDMA_WRITE, [a.sge(src.ctypes.data, 16, smr.lkey)],
                             rkey=dmr.rkey, remote=dst.ctypes.data))
    assert [w.status for w in a.poll_all()] == [0] and np.array_equal(src, dst)


def test_query_returns_fresh_copies(pair: Pair) -> None:
    a, b = pair
    attr, init = a.qp.query(0)
    attr.dest_qp_num = 1
    attr.ah_attr.dlid = 99
    again, _ = a.qp.query(0)
    assert again.dest_qp_num == b.qp.qp_num and again is not attr
    assert attr.qp_state == again.cur_qp_state == S.IBV_QPS_RTS
    assert init.max_send_wr == again.cap.max_send_wr == 16


def test_recovery_query_reset_back_to_rts(pair: Pair) -> None:
    # the usual recovery: query the attributes, RESET, then RTS again with them
    a, b = pair
    Q = a.mods["pyverbs.qp"]
    src, dst = a.buffer(64, fill=3), b.buffer(64)
    smr, dmr = a.mr(src), b.mr(dst)
    a.qp.post_send(a.send_wr(OP.IBV_WR_RDMA_WRITE, [a.sge(src.ctypes.data, 64, 0xBAD)],
                             rkey=dmr.rkey, remote=dst.ctypes.data))
    assert [w.status for w in a.poll_all()] == [ST.IBV_WC_LOC_PROT_ERR]
    assert a.qp.qp_state == S.IBV_QPS_ERR
    saved, _ = a.qp.query(0x1FFFFF)
    a.qp.modify(Q.QPAttr(qp_state=int(S.IBV_QPS_RESET)), int(M.IBV_QP_STATE))
    a.qp.to_rts(saved)
    assert a.qp.qp_state == S.IBV_QPS_RTS
    a.qp.post_send(a.send_wr(OP.IBV_WR_RDMA_WRITE, [a.sge(src.ctypes.data, 64, smr.lkey)],
                             rkey=dmr.rkey, remote=dst.ctypes.data))
    assert [w.status for w in a.poll_all()] == [0] and np.array_equal(src, dst)


def test_transition_without_required_attributes_fails(fabric: Fabric, kit: Any) -> None:
    # ib_modify_qp_is_ok: RESET->INIT of an RC QP needs PKEY_INDEX, PORT, ACCESS_FLAGS
    a = kit.make_side(fabric.node("a"))
    Q = a.mods["pyverbs.qp"]
    a.qp.modify(Q.QPAttr(qp_state=int(S.IBV_QPS_RESET)), int(M.IBV_QP_STATE))
    with pytest.raises(PyverbsRDMAError) as info:
        a.qp.modify(Q.QPAttr(qp_state=int(S.IBV_QPS_INIT)),
                    int(M.IBV_QP_STATE | M.IBV_QP_PORT))
    assert info.value.error_code == errno.EINVAL and a.qp.qp_state == S.IBV_QPS_RESET
    a.qp.modify(Q.QPAttr(qp_state=int(S.IBV_QPS_INIT)),
                int(M.IBV_QP_STATE | M.IBV_QP_PORT | M.IBV_QP_PKEY_INDEX |
                    M.IBV_QP_ACCESS_FLAGS))
    assert a.qp.qp_state == S.IBV_QPS_INIT


def test_ud_init_carries_qkey(fabric: Fabric) -> None:
    # pyverbs _get_comp_mask: UD INIT = STATE | PKEY_INDEX | PORT | QKEY
    m = fabric.node("a").modules
    ctx = m["pyverbs.device"].Context(name="mlx5_0")
    pd = m["pyverbs.pd"].PD(ctx)
    cq = m["pyverbs.cq"].CQ(ctx, 8)
    Q = m["pyverbs.qp"]
    attr = Q.QPAttr()
    attr.qkey = 0x11111111
    qp = Q.QP(pd, Q.QPInitAttr(qp_type=int(T.IBV_QPT_UD), scq=cq, rcq=cq,
                               cap=Q.QPCap()), attr)
    got, _ = qp.query(0)
    assert qp.qp_state == S.IBV_QPS_RTS and got.qkey == 0x11111111
    rc = Q.QP(pd, Q.QPInitAttr(qp_type=int(T.IBV_QPT_RC), scq=cq, rcq=cq,
                               cap=Q.QPCap()), attr)
    assert rc.query(0)[0].qkey == 0                    # RC INIT carries no QKEY


def test_caps_written_through_init_attr_are_checked(fabric: Fabric) -> None:
    # QPInitAttr.max_send_wr writes attr.cap; rxe_qp_chk_cap: above the device -> EINVAL
    m = fabric.node("a").modules
    ctx = m["pyverbs.device"].Context(name="mlx5_0")
    pd, cq, Q = m["pyverbs.pd"].PD(ctx), m["pyverbs.cq"].CQ(ctx, 8), m["pyverbs.qp"]
    dev = ctx.query_device()
    for field, value in (("max_send_wr", dev.max_qp_wr + 1), ("max_recv_wr", dev.max_qp_wr + 1),
                         ("max_send_sge", dev.max_sge + 1), ("max_recv_sge", dev.max_sge + 1),
                         ("max_inline_data", 1 << 20)):
        init = Q.QPInitAttr(qp_type=int(T.IBV_QPT_RC), scq=cq, rcq=cq)
        setattr(init, field, value)
        assert getattr(init.cap, field) == value
        with pytest.raises(PyverbsRDMAError) as info:
            Q.QP(pd, init)
        assert info.value.error_code == errno.EINVAL, field
    init = Q.QPInitAttr(qp_type=int(T.IBV_QPT_RC), scq=cq, rcq=cq)
    init.max_send_wr, init.max_recv_wr = dev.max_qp_wr, 1
    assert Q.QP(pd, init).cap.max_send_wr == dev.max_qp_wr


@pytest.mark.parametrize(("profile", "code"), [("rxe", errno.EOPNOTSUPP), ("mlx5", 0)])
def test_raw_packet_qps_per_driver(profile: str, code: int) -> None:
    # rxe_qp_chk_init: RC, UC, UD only -> EOPNOTSUPP for RAW_PACKET
    f = Fabric(devices={"nic0": profile})
    m = f.node().modules
    ctx = m["pyverbs.device"].Context(name="nic0")
    pd, cq, Q = m["pyverbs.pd"].PD(ctx), m["pyverbs.cq"].CQ(ctx, 8), m["pyverbs.qp"]
    init = Q.QPInitAttr(qp_type=int(T.IBV_QPT_RAW_PACKET), scq=cq, rcq=cq, cap=Q.QPCap())
    if code:
        with pytest.raises(PyverbsRDMAError) as info:
            Q.QP(pd, init)
        assert info.value.error_code == code
    else:
        assert Q.QP(pd, init).qp_type == T.IBV_QPT_RAW_PACKET


def test_cq_comp_vector_and_cqe_conversion(fabric: Fabric) -> None:
    # uverbs create_cq: comp_vector >= num_comp_vectors -> EINVAL; pyverbs converts
    # cqe with __int__ (10.0 is 10)
    m = fabric.node("a").modules
    ctx = m["pyverbs.device"].Context(name="mlx5_0")
    C = m["pyverbs.cq"].CQ
    n = ctx.num_comp_vectors
    assert C(ctx, 4, comp_vector=n - 1).comp_vector == n - 1
    for bad in (n, n + 5):
        with pytest.raises(PyverbsRDMAError) as info:
            C(ctx, 4, comp_vector=bad)
        assert info.value.error_code == errno.EINVAL
    assert C(ctx, 10.0).cqe == 10                   # type: ignore[arg-type]
    with pytest.raises(TypeError):
        C(ctx, "10")                                # type: ignore[arg-type]


# single-field mask bits whose values the device does not bound (ibv_qp_attr_mask)
_SCALAR_BITS = {
    int(M.IBV_QP_EN_SQD_ASYNC_NOTIFY): "en_sqd_async_notify",
    int(M.IBV_QP_ACCESS_FLAGS): "qp_access_flags", int(M.IBV_QP_PKEY_INDEX): "pkey_index",
    int(M.IBV_QP_QKEY): "qkey", int(M.IBV_QP_PATH_MTU): "path_mtu",
    int(M.IBV_QP_TIMEOUT): "timeout", int(M.IBV_QP_RETRY_CNT): "retry_cnt",
    int(M.IBV_QP_RNR_RETRY): "rnr_retry", int(M.IBV_QP_RQ_PSN): "rq_psn",
    int(M.IBV_QP_MIN_RNR_TIMER): "min_rnr_timer", int(M.IBV_QP_SQ_PSN): "sq_psn",
    int(M.IBV_QP_PATH_MIG_STATE): "path_mig_state", int(M.IBV_QP_DEST_QPN): "dest_qp_num",
    int(M.IBV_QP_RATE_LIMIT): "rate_limit",
}


@settings(max_examples=60, deadline=None)
@given(st.sets(st.sampled_from(sorted(_SCALAR_BITS))), st.integers(1, 250))
def test_modify_changes_exactly_the_masked_fields(bits: set[int], value: int) -> None:
    # rxe_qp_from_attr, field by field: a bit in the mask copies its field, nothing else
    f = Fabric(devices={"mlx5_0": "mlx5"})
    m = f.node().modules
    ctx = m["pyverbs.device"].Context(name="mlx5_0")
    pd, cq, Q = m["pyverbs.pd"].PD(ctx), m["pyverbs.cq"].CQ(ctx, 8), m["pyverbs.qp"]
    start = Q.QPAttr()
    start.qp_access_flags = RW
    qp = Q.QP(pd, Q.QPInitAttr(qp_type=int(T.IBV_QPT_RC), scq=cq, rcq=cq, cap=Q.QPCap()),
              start)
    before, _ = qp.query(0)
    new = Q.QPAttr()
    for field in _SCALAR_BITS.values():
        setattr(new, field, value)
    mask = 0
    for bit in bits:
        mask |= bit
    qp.modify(new, mask)
    after, _ = qp.query(0)
    for bit, field in _SCALAR_BITS.items():
        want = value if bit in bits else getattr(before, field)
        assert getattr(after, field) == want, field


def test_to_rtr_from_init_keeps_the_access_flags_given_at_creation(fabric: Fabric,
                                                                   kit: Any) -> None:
    # pyverbs qp.pyx QP.to_rtr: ``if self.qp_state != IBV_QPS_INIT: self.to_init(...)``,
    # so a QP created in INIT with no access flags keeps none, whatever to_rts is given;
    # an RDMA WRITE to it then fails at the responder (rxe_resp.c check_op_valid)
    a = kit.make_side(fabric.node("a"))
    b = kit.make_side(fabric.node("b"), access=0)
    kit.connect(a, b)
    kit.connect(b, a, access=RW)           # flags given only at RTR/RTS: not applied
    attr, _ = b.qp.query(int(M.IBV_QP_ACCESS_FLAGS))
    assert attr.qp_access_flags == 0
    src, dst = a.buffer(64, fill=5), b.buffer(64)
    smr, dmr = a.mr(src), b.mr(dst)
    a.qp.post_send(a.send_wr(OP.IBV_WR_RDMA_WRITE, [a.sge(src.ctypes.data, 64, smr.lkey)],
                             rkey=dmr.rkey, remote=dst.ctypes.data))
    assert [w.status for w in a.poll_all()] == [10]          # mlx5 (see _oracle)
    assert not np.array_equal(src, dst)
