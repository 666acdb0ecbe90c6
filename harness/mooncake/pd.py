"""PD transfer: the prefill node RDMA-WRITEs every page into the decode node's host pool.

One RDMA WRITE per page extent, with the keys of the MRs the two nodes' stores registered
(docs/mooncake-verbs.md §1.5), on RC QPs of the fake fabric: a page cut by an MR seam fails as a
real NIC fails it, with IBV_WC_LOC_PROT_ERR (prefill side) or IBV_WC_REM_ACCESS_ERR (decode
side, §5.3). Released Mooncake only: HEAD's register_buffer publishes no rkey (§1.5).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from kvreg.fakes.mooncake import FakeMooncake
from kvreg.fakes.verbs import enums as V
from kvreg.fakes.verbs.addr import AHAttr, GlobalRoute
from kvreg.fakes.verbs.cq import CQ
from kvreg.fakes.verbs.errors import PyverbsRDMAError
from kvreg.fakes.verbs.fabric import MrRecord, Node
from kvreg.fakes.verbs.pd import PD
from kvreg.fakes.verbs.qp import QP, QPAttr, QPCap, QPInitAttr
from kvreg.fakes.verbs.wr import SGE, SendWR
from kvreg.harness.pools import PoolGeometry
from kvreg.harness.run.rules import ORDER_TRANSFER

from .transfers import (
    Int64s,
    IoFailure,
    MrRange,
    PoolBuffer,
    failure_cause,
    fill_pattern,
    last_seq,
    mr_ranges,
    part_words,
)

__all__ = ["pd_transfer"]

RW = int(V.ibv_access_flags.IBV_ACCESS_LOCAL_WRITE | V.ibv_access_flags.IBV_ACCESS_REMOTE_WRITE
         | V.ibv_access_flags.IBV_ACCESS_REMOTE_READ)


class _EnginePD(PD):
    """The PD of a transfer engine's device: QPs in it may use the engine's MRs, as the
    endpoints of Mooncake's RdmaContext do (the fake engine keeps only the PD's number)."""

    def __init__(self, ctx: Any, pd_id: int) -> None:
        super().__init__(ctx)
        self._engine_pd_id = pd_id

    @property
    def pd_id(self) -> int:
        return self._engine_pd_id


@dataclass
class _Endpoint:
    ctx: Any
    cq: CQ
    qp: QP


def _endpoint(node: Node, nic: str, pd_id: int) -> _Endpoint:
    ctx = node.modules["pyverbs.device"].Context(name=nic)
    pd = _EnginePD(ctx, pd_id)
    cq = CQ(ctx, 16)
    cap = QPCap(max_send_wr=1, max_recv_wr=1, max_send_sge=1, max_recv_sge=1)
    init = QPInitAttr(qp_type=int(V.ibv_qp_type.IBV_QPT_RC), scq=cq, rcq=cq, cap=cap)
    # the responder's access flags are INIT attributes: they must be given when the QP is
    # created (it goes to INIT then); pyverbs' to_rtr/to_rts do not apply them again
    created = QPAttr()
    created.qp_access_flags = RW
    return _Endpoint(ctx, cq, QP(pd, init, created))


def _connect(x: _Endpoint, y: _Endpoint) -> None:
    attr = QPAttr()
    attr.qp_access_flags = RW
    attr.dest_qp_num = y.qp.qp_num
    attr.ah_attr = AHAttr(is_global=1, gr=GlobalRoute(dgid=y.ctx.query_gid(1, 0)), port_num=1)
    x.qp.to_rts(attr)


def _mr_at(ranges: list[MrRange], starts: list[int], ptr: int) -> MrRecord | None:
    """The MR whose range holds ``ptr``: ``ranges`` sorted by start (they never overlap),
    ``starts`` their starts; a bisect, so a page costs log(MRs), not MRs."""
    i = bisect.bisect_right(starts, ptr) - 1
    return ranges[i][2] if i >= 0 and ptr < ranges[i][1] else None


def pd_transfer(fake: FakeMooncake, geometry: PoolGeometry, src: Sequence[PoolBuffer],
                dst: Sequence[PoolBuffer], pages: Int64s,
                ranges: tuple[list[MrRange], list[MrRange]] | None = None
                ) -> tuple[int, IoFailure | None]:
    """RDMA WRITE every page extent from ``src`` (prefill) into ``dst`` (decode).

    ``ranges``: the two nodes' :func:`mr_ranges` (prefill, decode), if the caller has them."""
    fill_pattern(src, 11)
    s_node, d_node = src[0].node, dst[0].node
    s_rng, d_rng = ranges if ranges is not None else (mr_ranges(fake, s_node),
                                                      mr_ranges(fake, d_node))
    s_starts, d_starts = [x[0] for x in s_rng], [x[0] for x in d_rng]
    ext = geometry.page_extents(pages)
    if not len(ext):
        return 0, None
    # no MR at all: the first page reports it below (pd 0 belongs to no MR)
    s_pd = next((x[2].pd_id for x in s_rng if x[2] is not None), 0)
    d_pd = next((x[2].pd_id for x in d_rng if x[2] is not None), 0)
    nic = next(iter(fake.node(s_node).nics))
    a = _endpoint(fake.node(s_node), nic, s_pd)
    b = _endpoint(fake.node(d_node), nic, d_pd)
    sent = 0
    try:
        _connect(a, b)
        _connect(b, a)
        for r in range(len(ext)):
            buf, off, size = int(ext.buffer[r]), int(ext.offset[r]), int(ext.size[r])
            page = int(ext.page[r])
            lptr, rptr = src[buf].base + off, dst[buf].base + off
            lmr, rmr = _mr_at(s_rng, s_starts, lptr), _mr_at(d_rng, d_starts, rptr)
            if lmr is None or rmr is None:
                bufs, rng = (src, s_rng) if lmr is None else (dst, d_rng)
                return sent, IoFailure(
                    "pd-transfer-failed", part_words(geometry, bufs, page, None,
                                                      (buf, off, size)),
                    failure_cause(rng, bufs[buf], off, size), "no MR key to post the RDMA WRITE "
                    "from prefill to decode with", ORDER_TRANSFER)
            wr = SendWR(wr_id=r, opcode=int(V.ibv_wr_opcode.IBV_WR_RDMA_WRITE), num_sge=1,
                        sg=[SGE(lptr, size, lmr.lkey)])
            wr.set_wr_rdma(rmr.rkey, rptr)
            try:
                a.qp.post_send(wr)
            except PyverbsRDMAError as exc:
                return sent, IoFailure("pd-transfer-failed",
                                       part_words(geometry, src, page, None, (buf, off, size)),
                                       "", f"post_send failed: {exc}", last_seq(fake))
            _n, wcs = a.cq.poll(1)
            status = int(wcs[0].status) if wcs else 0
            if status:
                local = status == V.ibv_wc_status.IBV_WC_LOC_PROT_ERR
                bufs, rng = (src, s_rng) if local else (dst, d_rng)
                return sent, IoFailure(
                    "pd-transfer-failed", part_words(geometry, bufs, page, None,
                                                      (buf, off, size)),
                    failure_cause(rng, bufs[buf], off, size),
                    f"the RDMA WRITE from prefill to decode (call #{last_seq(fake) + 1}) completed "
                    f"with {V.ibv_wc_status(status).name} ({status})", last_seq(fake))
            sent += 1
            sb, db = src[buf].array, dst[buf].array
            if sb is not None and db is not None and \
                    not np.array_equal(sb[off:off + size], db[off:off + size]):
                return sent, IoFailure(
                    "round-trip-mismatch", part_words(geometry, dst, page, None,
                                                       (buf, off, size)),
                    "holds other bytes than prefill wrote",
                    "after a successful RDMA WRITE", ORDER_TRANSFER)
    finally:
        a.ctx.close()
        b.ctx.close()
    return sent, None
