"""The pyverbs surface that ordinary rdma-core test code and newer transfer engines use.

Completion channels (libibverbs ``ibv_req_notify_cq`` / ``ibv_get_cq_event`` /
``ibv_ack_cq_events``), GID and P_Key queries, ``DeviceAttrEx.odp_caps``, ``MR.rereg``
(libibverbs verbs.c ``ibv_rereg_mr``: IBV_REREG_MR_ERR_INPUT for bad input,
IBV_REREG_MR_ERR_CMD when the kernel refuses), ODP (implicit ODP needs
IBV_ODP_SUPPORT_IMPLICIT, mlx5 mr.c), ``PD.advise_mr``, the ``QPEx`` work-request API with
``CQEX`` polling (``ibv_wr_*``, ``ibv_start_poll``), and stand-ins for what is not modelled
(docs/mooncake-verbs.md §4.3-§4.5).
"""

from __future__ import annotations

import errno
import importlib
import mmap
from typing import Any

import numpy as np
import pytest

from kvreg.fakes.verbs import Fabric, NotModelledError, PyverbsRDMAError
from kvreg.fakes.verbs.enums import ENUMS
from kvreg.fakes.verbs.enums import ibv_access_flags as A
from kvreg.fakes.verbs.enums import ibv_wc_opcode as WO
from kvreg.fakes.verbs.enums import ibv_wr_opcode as OP

Pair = tuple[Any, Any]
LW = int(A.IBV_ACCESS_LOCAL_WRITE)
RW = LW | int(A.IBV_ACCESS_REMOTE_WRITE | A.IBV_ACCESS_REMOTE_READ)
ODP = int(A.IBV_ACCESS_ON_DEMAND)
R = ENUMS["ibv_rereg_mr_flags"]
E = ENUMS["ibv_rereg_mr_err_code"]
OPS = ENUMS["ibv_qp_create_send_ops_flags"]


def _ctx(profile: str = "mlx5") -> tuple[dict[str, Any], Any]:
    f = Fabric(devices={"nic0": profile})
    m = f.node().modules
    return m, m["pyverbs.device"].Context(name="nic0")


def test_completion_channel_events(pair: Pair) -> None:
    a, _b = pair
    C = a.mods["pyverbs.cq"]
    ch = C.CompChannel(a.ctx)
    cq = C.CQ(a.ctx, 8, None, ch, 0)
    other = C.CQ(a.ctx, 8, None, ch, 0)
    assert cq.comp_channel is ch
    with pytest.raises(PyverbsRDMAError) as info:
        ch.get_cq_event(cq)                        # nothing armed, nothing pending
    assert info.value.error_code == errno.EAGAIN
    cq.push(C.WC(wr_id=1))                         # not armed: no event
    with pytest.raises(PyverbsRDMAError):
        ch.get_cq_event(cq)
    cq.req_notify()
    cq.push(C.WC(wr_id=2))
    cq.push(C.WC(wr_id=3))                         # one event per arming
    ch.get_cq_event(cq)
    cq.ack_events(1)
    assert cq.unacked == 0
    with pytest.raises(PyverbsRDMAError):
        ch.get_cq_event(cq)
    other.req_notify()
    other.push(C.WC(wr_id=4))
    with pytest.raises(PyverbsRDMAError, match="unexpected CQ"):
        ch.get_cq_event(cq)
    assert [w.wr_id for w in cq.poll(8)[1]] == [1, 2, 3]


def test_gid_and_pkey_queries(pair: Pair) -> None:
    a, _ = pair
    gid = a.ctx.query_gid(1, 0)
    entry = a.ctx.query_gid_ex(1, 0)
    assert entry.gid_str() == str(gid) and entry.port_num == 1 and entry.gid_index == 0
    assert [e.gid_str() for e in a.ctx.query_gid_table(4)] == [str(gid)]
    # RoCE ports: ROCE_V2 (ibv_gid_type_sysfs 1); IB ports IB_ROCE_V1 (0)
    assert a.ctx.query_gid_type(1, 0) == 1
    assert a.ctx.query_pkey(1, 0) == 0xFFFF
    for bad in (lambda: a.ctx.query_gid_ex(1, 3), lambda: a.ctx.query_pkey(2, 0)):
        with pytest.raises(PyverbsRDMAError) as info:
            bad()
        assert info.value.error_code == errno.EINVAL


def test_gid_table_too_small_raises_the_negative_errno(pair: Pair) -> None:
    # ibv_query_gid_table(3): "negative errno value on error", and pyverbs raises with rc as is;
    # rdma-core tests/test_device.py::test_query_gid_table_bad_flow expects -errno.EINVAL
    a, _ = pair
    with pytest.raises(PyverbsRDMAError, match="Failed to query gid tables") as info:
        a.ctx.query_gid_table(0)
    assert info.value.error_code == -errno.EINVAL
    assert len(a.ctx.query_gid_table(1)) == 1      # a table that fits still answers


@pytest.mark.parametrize(("profile", "general", "rc"), [("mlx5", 0b11, 0b1111),
                                                         ("rxe", 0, 0)])
def test_device_attr_ex_advertises_odp_per_profile(profile: str, general: int,
                                                   rc: int) -> None:
    _m, ctx = _ctx(profile)
    ex = ctx.query_device_ex()
    assert (ex.odp_caps.general_caps, ex.odp_caps.rc_odp_caps) == (general, rc)
    assert ex.phys_port_cnt_ex == 1 and ex.tso_caps.max_tso == 0
    assert ex.orig_attr.max_mr_size == ctx.query_device().max_mr_size


def test_implicit_odp_and_advise_mr() -> None:
    m, ctx = _ctx("mlx5")
    pd = m["pyverbs.pd"].PD(ctx)
    MR = m["pyverbs.mr"].MR
    implicit = MR(pd, 0, LW | ODP, implicit=True)
    assert implicit.length == (1 << 64) - 1 and ctx.nic.pinned_bytes == 0
    arr = np.zeros(8192, np.uint8)
    odp = MR(pd, arr.nbytes, LW | ODP, address=arr.ctypes.data)
    W = m["pyverbs.wr"]
    pd.advise_mr(0, 1, [W.SGE(arr.ctypes.data, 4096, odp.lkey)])
    pinned = MR(pd, arr.nbytes, LW, address=arr.ctypes.data)
    for advice, sge, code in ((9, W.SGE(arr.ctypes.data, 64, odp.lkey), errno.EOPNOTSUPP),
                              (0, W.SGE(arr.ctypes.data, 64, pinned.lkey), errno.EINVAL),
                              (0, W.SGE(arr.ctypes.data, 1 << 20, odp.lkey), errno.EINVAL)):
        with pytest.raises(PyverbsRDMAError) as info:
            pd.advise_mr(advice, 0, [sge])
        assert info.value.error_code == code
    m2, ctx2 = _ctx("rxe")            # no ODP at all: EOPNOTSUPP (§5.2)
    pd2 = m2["pyverbs.pd"].PD(ctx2)
    with pytest.raises(PyverbsRDMAError) as info:
        m2["pyverbs.mr"].MR(pd2, 0, LW | ODP, implicit=True)
    assert info.value.error_code == errno.EOPNOTSUPP


def test_implicit_odp_needs_the_implicit_capability() -> None:
    f = Fabric()
    from kvreg.fakes.verbs import get_nic_profile

    f.add_device("nic0", get_nic_profile("mlx5").replace(odp_general_caps=0b01))
    m = f.node().modules
    pd = m["pyverbs.pd"].PD(m["pyverbs.device"].Context(name="nic0"))
    with pytest.raises(PyverbsRDMAError) as info:
        m["pyverbs.mr"].MR(pd, 0, LW | ODP, implicit=True)
    assert info.value.error_code == errno.EINVAL


def test_mr_rereg_translation_access_and_pd(pair: Pair) -> None:
    a, b = pair
    MR = a.mods["pyverbs.mr"].MR
    first, second = np.zeros(4096, np.uint8), (np.arange(8192) % 251).astype(np.uint8)
    mr = MR(a.pd, first.nbytes, LW, address=first.ctypes.data)
    lkey, pinned = mr.lkey, a.ctx.nic.pinned_bytes
    mr.rereg(int(R.IBV_REREG_MR_CHANGE_TRANSLATION | R.IBV_REREG_MR_CHANGE_ACCESS), None,
             second.ctypes.data, second.nbytes, RW)
    assert (mr.buf, mr.length, mr.lkey) == (second.ctypes.data, second.nbytes, lkey)
    def pages(addr: int, n: int) -> int:              # whole pages pinned (§5.2)
        return (addr + n + 4095) // 4096 - addr // 4096

    assert a.ctx.nic.pinned_bytes == pinned + 4096 * (
        pages(second.ctypes.data, 8192) - pages(first.ctypes.data, 4096))
    # the re-registered range is what the data path now accepts
    dst = b.buffer(16)
    dmr = b.mr(dst)
    a.qp.post_send(a.send_wr(OP.IBV_WR_RDMA_WRITE, [a.sge(second.ctypes.data + 8, 16, lkey)],
                             rkey=dmr.rkey, remote=dst.ctypes.data))
    assert [w.status for w in a.poll_all()] == [0]
    assert bytes(dst) == bytes(second[8:24])
    pd2 = a.mods["pyverbs.pd"].PD(a.ctx)
    mr.rereg(int(R.IBV_REREG_MR_CHANGE_PD), pd2, 0, 0, 0)
    assert mr.pd is pd2


def test_mr_rereg_failures_leave_the_mr_unchanged(pair: Pair) -> None:
    a, _ = pair
    MR = a.mods["pyverbs.mr"].MR
    arr = np.zeros(4096, np.uint8)
    mr = MR(a.pd, arr.nbytes, LW, address=arr.ctypes.data)
    state = (mr.buf, mr.length, mr.access, a.ctx.nic.pinned_bytes)
    m = mmap.mmap(-1, mmap.PAGESIZE)
    import ctypes

    view = ctypes.c_char.from_buffer(m)
    gone = ctypes.addressof(view)
    del view
    m.close()
    cases = [(0, None, 0, 0, 0, "IBV_REREG_MR_ERR_INPUT"),                 # no flags
             (1 << 5, None, 0, 0, 0, "IBV_REREG_MR_ERR_INPUT"),            # unknown flag
             (int(R.IBV_REREG_MR_CHANGE_TRANSLATION), None, 0, 64, 0,
              "IBV_REREG_MR_ERR_INPUT"),                                   # no address
             (int(R.IBV_REREG_MR_CHANGE_PD), None, 0, 0, 0, "IBV_REREG_MR_ERR_INPUT"),
             (int(R.IBV_REREG_MR_CHANGE_ACCESS), None, 0, 0,
              int(A.IBV_ACCESS_REMOTE_WRITE), "IBV_REREG_MR_ERR_CMD"),     # EINVAL access
             (int(R.IBV_REREG_MR_CHANGE_TRANSLATION), None, gone, 4096, 0,
              "IBV_REREG_MR_ERR_CMD")]                                      # EFAULT
    for flags, pd, addr, length, access, word in cases:
        with pytest.raises(PyverbsRDMAError, match=f"Failed to rereg MR: {word}$"):
            mr.rereg(flags, pd, addr, length, access)
        assert (mr.buf, mr.length, mr.access, a.ctx.nic.pinned_bytes) == state
    assert int(E.IBV_REREG_MR_ERR_INPUT) == -1 and int(E.IBV_REREG_MR_ERR_CMD) == -4


def test_qpex_rdma_write_and_read_with_cqex(fabric: Fabric, kit: Any) -> None:
    # the ibv_wr_* API: wr_start, wr_id/wr_flags, wr_rdma_write/read, wr_set_sge,
    # wr_complete; completions polled with start_poll/poll_next/end_poll
    sides = []
    for name in ("a", "b"):
        m = fabric.node(name).modules
        ctx = m["pyverbs.device"].Context(name="mlx5_0")
        pd = m["pyverbs.pd"].PD(ctx)
        C, Q = m["pyverbs.cq"], m["pyverbs.qp"]
        cq = C.CQEX(ctx, C.CqInitAttrEx(cqe=16))
        init = Q.QPInitAttrEx(qp_type=2, scq=cq, rcq=cq, pd=pd,
                              cap=Q.QPCap(max_send_wr=8, max_recv_wr=8),
                              send_ops_flags=int(OPS.IBV_QP_EX_WITH_RDMA_WRITE |
                                                 OPS.IBV_QP_EX_WITH_RDMA_READ))
        attr = Q.QPAttr()
        attr.qp_access_flags = RW
        qp = Q.QPEx(ctx, init, attr)
        sides.append(kit.Side(fabric.node(name), m, ctx, pd, cq, qp))
    a, b = sides
    kit.connect(a, b)
    kit.connect(b, a)
    src, dst, back = a.buffer(256, fill=4), b.buffer(256), a.buffer(256)
    smr, dmr, bmr = a.mr(src), b.mr(dst), a.mr(back)
    qp = a.qp
    qp.wr_start()
    qp.wr_id, qp.wr_flags = 10, 2
    qp.wr_rdma_write(dmr.rkey, dst.ctypes.data)
    W = a.mods["pyverbs.wr"]
    # pyverbs takes one SGE object (qp.pyx wr_set_sge(self, SGE sge not None), v44 on;
    # rdma-core tests/test_qpex.py), and a count with a list for wr_set_sge_list
    with pytest.raises(TypeError):
        qp.wr_set_sge(smr.lkey, src.ctypes.data, 256)
    with pytest.raises(TypeError, match="SGE"):
        qp.wr_set_sge(smr.lkey)
    qp.wr_set_sge(W.SGE(src.ctypes.data, 256, smr.lkey))
    qp.wr_id = 11
    qp.wr_rdma_read(dmr.rkey, dst.ctypes.data)
    qp.wr_set_sge_list(1, [W.SGE(back.ctypes.data, 256, bmr.lkey),
                           W.SGE(src.ctypes.data, 1, smr.lkey)])
    qp.wr_complete()
    poll = a.mods["pyverbs.cq"].PollCqAttr()
    cq = a.cq
    seen = []
    rc = cq.start_poll(poll)
    while rc == 0:
        seen.append((cq.wr_id, cq.status, cq.read_opcode(), cq.read_byte_len()))
        rc = cq.poll_next()
    cq.end_poll()
    assert rc == errno.ENOENT
    assert seen == [(10, 0, WO.IBV_WC_RDMA_WRITE, 256), (11, 0, WO.IBV_WC_RDMA_READ, 256)]
    assert np.array_equal(dst, src) and np.array_equal(back, src)
    assert cq.start_poll(poll) == errno.ENOENT
    qp.wr_start()
    with pytest.raises(Exception, match="IBV_QP_EX_WITH_SEND"):
        qp.wr_send()                         # not in send_ops_flags
    qp.wr_abort()
    with pytest.raises(NotModelledError, match="COVERAGE"):
        qp.wr_atomic_cmp_swp(1, 0, 0, 0)


def test_stand_ins_exist_like_the_real_names_and_refuse_use(pair: Pair) -> None:
    a, _ = pair
    m = a.mods
    # hasattr is True for a real name the fake does not model, False for an invented one
    # (DmaBufMR is modelled since docs/mooncake-verbs.md §5.6; MREx is not)
    assert hasattr(m["pyverbs.mr"], "MREx") and hasattr(m["pyverbs.device"], "DM")
    assert hasattr(a.ctx, "get_async_event") and hasattr(a.cq, "resize")
    assert hasattr(a.qp, "set_ece") and hasattr(a.pd, "unimport")
    assert not hasattr(m["pyverbs.mr"], "NoSuch") and not hasattr(a.ctx, "no_such")
    for use in (lambda: m["pyverbs.mr"].MREx(a.pd, 4096, LW),
                lambda: a.ctx.get_async_event(), lambda: a.cq.resize(16),
                lambda: a.ctx.query_port_speed(1), lambda: a.qp.set_ece(None)):
        with pytest.raises(NotModelledError, match="COVERAGE"):
            use()


def test_utils_and_helpers_import_through_the_patch() -> None:
    with Fabric(devices={"mlx5_0": "mlx5"}).patch():
        utils = importlib.import_module("pyverbs.utils")
        device = importlib.import_module("pyverbs.device")
        from pyverbs.qp import QPEx  # noqa: F401  (the extended API is importable)

        assert utils.qp_state_to_str(3) == "RTS"
        assert utils.access_flags_to_str(7) == "Local write Remote write Remote read "
        assert device.port_state_to_str(4) == "Active (4)"
        assert device.translate_event_type(16) == ".IBV_EVENT_QP_LAST_WQE_REACHED"
