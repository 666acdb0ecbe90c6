"""The RDMA fidelity probes: ``ibv_reg_mr``'s errno rules and the MR-boundary completions.

docs/mooncake-verbs.md §5.2 gives the errno of each registration misuse and §5.3 the completion
status when an SGE or a remote range leaves its MR; the fake verbs model both. These probes
ask the same questions of a real device (any with an ACTIVE port; Soft-RoCE is enough) and
of a fake NIC declared like it (:meth:`~.verbs.FakeVerbs.like`). Observations are errnos
and ``ibv_wc_status`` values, never message text.

Constants are plain ints from libibverbs' ``verbs.h`` (§4.6), so the probes work with both
pyverbs enum generations (§4.1).
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable
from typing import Any

from .memory import cap_ipc_lock, prefaulted
from .probe_types import Probe, ProbeError, ProbeSkipped

__all__ = ["RDMA_PROBES", "VerbsProbeContext"]

LOCAL_WRITE, REMOTE_WRITE, REMOTE_READ = 1, 2, 4
RW = LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ
QPT_RC = 2
WR_RDMA_WRITE = 0
MTU_1024 = 3
LINK_LAYER_INFINIBAND = 1
PAGE = 4096
POLL_SECONDS = 5.0     # a completion on a loopback QP arrives in microseconds


class VerbsProbeContext:
    """An open device and PD, registration helpers and loopback RC QPs; closed in reverse."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend
        self.m = backend.modules
        self.observation: dict[str, Any] = {}
        self.details: dict[str, Any] = {}
        self._open: list[Any] = []
        self._keep: list[Any] = []
        self.ctx = self.m["pyverbs.device"].Context(name=backend.device)
        self.pd = self.m["pyverbs.pd"].PD(self.ctx)

    # -- memory and MRs -----------------------------------------------------------------------
    def buffer(self, nbytes: int) -> int:
        arr = prefaulted(nbytes)
        self.backend.track(arr, name=f"probe{len(self._keep)}")
        self._keep.append(arr)
        return int(arr.ctypes.data)

    def mr(self, addr: int, length: int, access: int = RW) -> Any:
        mr = self.m["pyverbs.mr"].MR(self.pd, length, access, address=addr)
        self._open.append(mr)
        return mr

    def reg(self, addr: int, length: int, access: int = RW) -> int:
        """0 when ``ibv_reg_mr`` succeeds, else its errno (the MR is closed at the end)."""
        try:
            self.mr(addr, length, access)
        except self.m["pyverbs.pyverbs_error"].PyverbsRDMAError as exc:
            return int(exc.error_code)
        return 0

    # -- loopback RC traffic ----------------------------------------------------------------
    def _ah(self) -> Any:
        addr = self.m["pyverbs.addr"]
        port = self.ctx.query_port(1)
        if int(port.link_layer) == LINK_LAYER_INFINIBAND:
            return addr.AHAttr(dlid=int(port.lid), port_num=1)
        index, gid = self._gid()
        self.details["gid_index"] = index
        return addr.AHAttr(is_global=1, port_num=1,
                           gr=addr.GlobalRoute(dgid=gid, sgid_index=index))

    def _gid(self) -> tuple[int, Any]:
        """The GID to address our own port: KVREG_RDMA_GID_INDEX, else the first usable one
        (an IPv4-mapped RoCEv2 GID preferred, as rdma-core's tests pick)."""
        wanted = os.environ.get("KVREG_RDMA_GID_INDEX")
        if wanted is not None:
            return int(wanted), self.ctx.query_gid(1, int(wanted))
        first = None
        for index in range(16):
            try:
                gid = self.ctx.query_gid(1, index)
            except Exception:
                break
            text = str(gid)
            if text.replace("0", "").replace(":", ""):
                if "ffff:" in text:
                    return index, gid
                first = first or (index, gid)
        if first is None:
            raise ProbeError("port 1 has no usable GID (set KVREG_RDMA_GID_INDEX)")
        return first

    def qp_pair(self) -> tuple[Any, Any, Any]:
        """Two RC QPs on this device connected to each other, sharing one CQ."""
        cq = self.m["pyverbs.cq"].CQ(self.ctx, 64)
        self._open.append(cq)
        q = self.m["pyverbs.qp"]
        qps = []
        for _ in range(2):
            cap = q.QPCap(max_send_wr=8, max_recv_wr=8, max_send_sge=2, max_recv_sge=2)
            init = q.QPInitAttr(qp_type=QPT_RC, scq=cq, rcq=cq, cap=cap, sq_sig_all=1)
            created = q.QPAttr()
            created.qp_access_flags = RW     # INIT attribute: to_rtr keeps an INIT QP's flags
            qp = q.QP(self.pd, init, created)
            self._open.append(qp)
            qps.append(qp)
        ah = self._ah()
        for me, peer in ((qps[0], qps[1]), (qps[1], qps[0])):
            attr = q.QPAttr(port_num=1, path_mtu=MTU_1024)
            attr.qp_access_flags = RW
            attr.dest_qp_num = peer.qp_num
            attr.ah_attr = ah
            attr.max_dest_rd_atomic = attr.max_rd_atomic = 1
            attr.min_rnr_timer, attr.timeout, attr.retry_cnt, attr.rnr_retry = 12, 14, 7, 7
            me.to_rts(attr)
        return qps[0], qps[1], cq

    def write(self, qp: Any, cq: Any, addr: int, length: int, lkey: int, rkey: int,
              remote: int, wr_id: int) -> int:
        """Post one signalled RDMA WRITE and return its completion status."""
        w = self.m["pyverbs.wr"]
        wr = w.SendWR(wr_id=wr_id, opcode=WR_RDMA_WRITE, num_sge=1,
                      sg=[w.SGE(addr, length, lkey)])
        wr.set_wr_rdma(rkey, remote)
        qp.post_send(wr)
        deadline = time.monotonic() + POLL_SECONDS
        while time.monotonic() < deadline:
            n, wcs = cq.poll(1)
            if n:
                return int(wcs[0].status)
        raise ProbeError(f"no completion for WR {wr_id} within {POLL_SECONDS} s")

    # -- cleanup -------------------------------------------------------------------------------
    def close(self) -> list[str]:
        problems = []
        for obj in reversed(self._open):
            try:
                obj.close()
            except Exception as exc:
                problems.append(f"{type(obj).__name__}.close: {exc}")
        for obj in (self.pd, self.ctx):
            obj.close()
        self._open.clear()
        self._keep.clear()
        return problems


# -- §5.2 registration rules ------------------------------------------------------------------

def mr_zero_length(ctx: VerbsProbeContext) -> None:
    ctx.observation["errno"] = ctx.reg(ctx.buffer(PAGE), 0, LOCAL_WRITE)


def mr_remote_write_without_local_write(ctx: VerbsProbeContext) -> None:
    ctx.observation["errno"] = ctx.reg(ctx.buffer(PAGE), PAGE, REMOTE_WRITE)


def mr_unaligned(ctx: VerbsProbeContext) -> None:
    ctx.observation["errno"] = ctx.reg(ctx.buffer(PAGE) + 7, 100, LOCAL_WRITE)


def mr_overlapping(ctx: VerbsProbeContext) -> None:
    p = ctx.buffer(4 * PAGE)
    ctx.observation["first"] = ctx.reg(p, 2 * PAGE)
    ctx.observation["overlapping"] = ctx.reg(p + PAGE, 2 * PAGE)
    ctx.observation["same_range"] = ctx.reg(p, 2 * PAGE)


def mr_memlock(ctx: VerbsProbeContext) -> None:
    p = ctx.buffer(1 << 20)
    ctx.details.update(euid=os.geteuid(), cap_ipc_lock=cap_ipc_lock())
    with ctx.backend.memlock(64 << 10) as soft:
        ctx.details["memlock_soft"] = soft
        ctx.observation["errno"] = ctx.reg(p, 1 << 20, LOCAL_WRITE)
    ctx.details["errno_name"] = errno.errorcode.get(ctx.observation["errno"], "OK")


def mr_over_max_mr_size(ctx: VerbsProbeContext) -> None:
    limit = int(ctx.ctx.query_device().max_mr_size)
    if limit > 1 << 30:
        raise ProbeSkipped(f"the device advertises max_mr_size {limit}; only limits up to "
                           "1 GiB are probed (the MR would have to be that big)")
    ctx.observation["errno"] = ctx.reg(ctx.buffer(limit + PAGE), limit + PAGE, LOCAL_WRITE)


# -- §5.3 ranges outside an MR ----------------------------------------------------------------

def sge_spans_two_mrs(ctx: VerbsProbeContext) -> None:
    src, dst = ctx.buffer(2 * PAGE), ctx.buffer(2 * PAGE)
    a, _b = ctx.mr(src, PAGE), ctx.mr(src + PAGE, PAGE)
    remote = ctx.mr(dst, 2 * PAGE)
    qp, _peer, cq = ctx.qp_pair()
    ctx.observation["control"] = ctx.write(qp, cq, src, 100, a.lkey, remote.rkey, dst, 1)
    ctx.observation["spanning"] = ctx.write(qp, cq, src + PAGE - 96, 200, a.lkey,
                                            remote.rkey, dst, 2)
    ctx.observation["next"] = ctx.write(qp, cq, src, 100, a.lkey, remote.rkey, dst, 3)


def remote_outside_mr(ctx: VerbsProbeContext) -> None:
    src, dst = ctx.buffer(PAGE), ctx.buffer(2 * PAGE)
    local = ctx.mr(src, PAGE)
    remote = ctx.mr(dst, PAGE)
    qp, _peer, cq = ctx.qp_pair()
    ctx.observation["control"] = ctx.write(qp, cq, src, 100, local.lkey, remote.rkey, dst, 1)
    ctx.observation["outside"] = ctx.write(qp, cq, src, 200, local.lkey, remote.rkey,
                                           dst + PAGE - 100, 2)


def _p(name: str, spec: str, question: str, expect: str,
       body: Callable[[VerbsProbeContext], None]) -> Probe:
    return Probe(name, "rdma", "verbs §5", spec, question, expect, body)


RDMA_PROBES: tuple[Probe, ...] = (
    _p("mr_zero_length", "mooncake-verbs §5.2 length 0 [verified]",
       "ibv_reg_mr of 0 bytes at a valid address?", "EINVAL (22)", mr_zero_length),
    _p("mr_remote_write_without_local_write", "mooncake-verbs §5.2 access check [verified]",
       "REMOTE_WRITE without LOCAL_WRITE?", "EINVAL (22)",
       mr_remote_write_without_local_write),
    _p("mr_unaligned", "mooncake-verbs §5.2 no alignment requirement [verified]",
       "100 bytes at an address 7 bytes into a page?", "0", mr_unaligned),
    _p("mr_overlapping", "mooncake-verbs §5.2 (no overlap rule) [verified]",
       "Overlapping and identical MRs on one PD?", "all 0", mr_overlapping),
    _p("mr_memlock", "mooncake-verbs §5.2 RLIMIT_MEMLOCK [verified]",
       "1 MiB MR with the soft memlock limit at 64 KiB?",
       "ENOMEM (12) without CAP_IPC_LOCK", mr_memlock),
    _p("mr_over_max_mr_size", "mooncake-verbs §5.2 len > max_mr_size [verified]",
       "An MR one page above max_mr_size?", "driver-specific (EINVAL on erdma/efa)",
       mr_over_max_mr_size),
    _p("sge_spans_two_mrs", "mooncake-verbs §5.3 SGE across two MRs [verified rxe]",
       "RDMA WRITE whose SGE spans two adjacent MRs, then one more WR?",
       "control 0, spanning 4 (LOC_PROT_ERR), next 5 (WR_FLUSH_ERR)", sge_spans_two_mrs),
    _p("remote_outside_mr", "mooncake-verbs §5.3 remote range outside the MR [verified]",
       "RDMA WRITE whose remote range leaves the remote MR?",
       "control 0, outside 10 (REM_ACCESS_ERR)", remote_outside_mr),
)
