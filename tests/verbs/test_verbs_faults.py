"""Fault injection on every verbs point (ARCHITECTURE.md#fault-plans; docs/mooncake-verbs.md §4.5,
§5.2)."""

from __future__ import annotations

import errno
from typing import Any

import pytest

from kvreg.fakes.faults import FaultPlan, FaultPlanError
from kvreg.fakes.verbs import Fabric, PyverbsRDMAError
from kvreg.fakes.verbs.enums import ibv_access_flags as A
from kvreg.fakes.verbs.enums import ibv_qp_state as S
from kvreg.fakes.verbs.enums import ibv_wc_status as ST
from kvreg.fakes.verbs.enums import ibv_wr_opcode as OP

LW = int(A.IBV_ACCESS_LOCAL_WRITE)
WRITE = int(OP.IBV_WR_RDMA_WRITE)


def _pd(f: Fabric) -> tuple[Any, Any]:
    m = f.node().modules
    return m["pyverbs.mr"].MR, m["pyverbs.pd"].PD(m["pyverbs.device"].Context(name="mlx5_0"))


def test_reg_mr_fault_by_errno_name_on_the_nth_call() -> None:
    # §5.2: ENOMEM is a real ibv_reg_mr errno; the name resolves in the verbs family
    f = Fabric(devices={"mlx5_0": "mlx5"})
    MR, pd = _pd(f)
    buf = f.node().virtual(1 << 20)
    f.inject("reg_mr", nth=2, error="ENOMEM")
    first = MR(pd, 4096, LW, address=buf.data_ptr())
    with pytest.raises(PyverbsRDMAError, match="Failed to register a MR") as info:
        MR(pd, 4096, LW, address=buf.data_ptr() + 4096)
    assert info.value.error_code == errno.ENOMEM
    third = MR(pd, 4096, LW, address=buf.data_ptr() + 8192)
    assert [e.code for e in f.trace.calls("reg_mr")] == [0, errno.ENOMEM, 0]
    assert f.trace.calls("reg_mr")[1].injected
    assert "-> 12 ENOMEM [injected]" in f.trace.format()
    assert len(f.live_mrs()) == 2
    first.close()
    third.close()


def test_reg_mr_predicate_sees_size_and_buffer_offset() -> None:
    f = Fabric(devices={"mlx5_0": "mlx5"})
    MR, pd = _pd(f)
    pool = f.node().virtual(8 << 20, name="kv")
    f.faults.arm("verbs.reg_mr", error=errno.EFAULT,
                 predicate=lambda c: c.buffer == "kv" and c.offset == 2 << 20)
    codes = []
    for i in range(4):
        try:
            MR(pd, 1 << 20, LW, address=pool.data_ptr() + (i << 20)).close()
            codes.append(0)
        except PyverbsRDMAError as exc:
            codes.append(exc.error_code)
    assert codes == [0, 0, errno.EFAULT, 0]


def test_dereg_mr_fault_leaves_the_mr_registered() -> None:
    # §4.4: close() failing raises PyverbsRDMAError('Failed to dereg MR', rc); the MR stays
    f = Fabric(devices={"mlx5_0": "mlx5"})
    MR, pd = _pd(f)
    mr = MR(pd, 4096, LW)
    f.inject("dereg_mr", nth=1, error="EBUSY")
    with pytest.raises(PyverbsRDMAError, match="Failed to dereg MR") as info:
        mr.close()
    assert info.value.error_code == errno.EBUSY
    assert not mr.closed and len(f.live_mrs()) == 1
    mr.close()
    assert f.live_mrs() == []


def test_post_send_and_post_recv_faults(pair: tuple[Any, Any]) -> None:
    # §4.5: immediate post errors are ENOMEM/EINVAL
    a, b = pair
    f = a.node.fabric
    src, dst = a.buffer(4096), b.buffer(4096)
    smr, dmr = a.mr(src), b.mr(dst)
    wr = a.send_wr(WRITE, [a.sge(src.ctypes.data, 64, smr.lkey)], rkey=dmr.rkey,
                   remote=dst.ctypes.data)
    f.inject("post_send", nth=1, error="ENOMEM")
    with pytest.raises(PyverbsRDMAError, match="Failed to post send") as info:
        a.qp.post_send(wr)
    assert info.value.error_code == errno.ENOMEM
    assert a.poll_all() == [] and a.qp.qp_state == S.IBV_QPS_RTS    # nothing was posted
    a.qp.post_send(wr)
    assert [w.status for w in a.poll_all()] == [0]
    f.inject("post_recv", nth=1, error=errno.EINVAL)
    W = b.mods["pyverbs.wr"]
    with pytest.raises(PyverbsRDMAError, match="Failed to post recv"):
        b.qp.post_recv(W.RecvWR(num_sge=1, sg=[b.sge(dst.ctypes.data, 8, dmr.lkey)]))


def test_completion_status_fault_errors_the_qp(pair: tuple[Any, Any]) -> None:
    # §4.6 / §5.3: a WR completes with the injected status; the QP goes to ERR; later flush
    a, b = pair
    f = a.node.fabric
    src, dst = a.buffer(4096, fill=1), b.buffer(4096)
    smr, dmr = a.mr(src), b.mr(dst)
    f.inject("completion", nth=1, error="REM_ACCESS_ERR")
    for i in range(2):
        a.qp.post_send(a.send_wr(WRITE, [a.sge(src.ctypes.data, 64, smr.lkey)], wr_id=i,
                                 rkey=dmr.rkey, remote=dst.ctypes.data))
    assert [(w.wr_id, w.status) for w in a.poll_all()] == [
        (0, ST.IBV_WC_REM_ACCESS_ERR), (1, ST.IBV_WC_WR_FLUSH_ERR)]
    assert not dst.any()
    assert "IBV_WC_REM_ACCESS_ERR [injected]" in f.trace.format()


def test_codes_must_be_real_for_the_point() -> None:
    plan = FaultPlan()
    Fabric()     # importing the verbs package registers its points
    with pytest.raises(FaultPlanError, match=r"cannot return 16 \(EBUSY\)") as info:
        plan.arm("verbs.reg_mr", error="EBUSY")
    assert "12 ENOMEM" in str(info.value)
    with pytest.raises(FaultPlanError, match="unknown errno name"):
        plan.arm("verbs.reg_mr", error="ENOTANERRNO")
    with pytest.raises(FaultPlanError, match="unknown CUDA error name"):
        plan.arm("cudart.cudaHostRegister", error="EINVAL")   # names stay per family
    with pytest.raises(FaultPlanError, match="cannot return 0"):
        plan.arm("verbs.completion", error=0)
    assert len(plan) == 0


def test_group_rule_by_name_skips_other_families() -> None:
    # "ENOMEM" (12) is an errno; completion status 12 is RETRY_EXC_ERR and must not fire
    f = Fabric(devices={"mlx5_0": "mlx5"})
    rule = f.faults.arm("verbs.*", error="ENOMEM", times=100)
    assert rule.only is not None and "verbs.completion" not in rule.only
    assert rule.applies_to("verbs.reg_mr") and not rule.applies_to("verbs.completion")
    assert "return ENOMEM (12)" in rule.describe()


def test_raise_and_delay_actions() -> None:
    f = Fabric(devices={"mlx5_0": "mlx5"})
    MR, pd = _pd(f)
    f.faults.arm("verbs.reg_mr", raise_=KeyboardInterrupt, nth=1)
    with pytest.raises(KeyboardInterrupt):
        MR(pd, 4096, LW)
    assert f.trace[-1].injected and f.live_mrs() == []
