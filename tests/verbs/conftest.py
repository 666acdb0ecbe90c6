"""Fixtures for the fake verbs tests: a two-node fabric with connected RC QPs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from kvreg.fakes.verbs import Fabric, Node
from kvreg.fakes.verbs.enums import ibv_access_flags as A
from kvreg.fakes.verbs.enums import ibv_qp_type

RW = int(A.IBV_ACCESS_LOCAL_WRITE | A.IBV_ACCESS_REMOTE_WRITE | A.IBV_ACCESS_REMOTE_READ)


@dataclass
class Side:
    """One end of a connection: the node and its pyverbs objects."""

    node: Node
    mods: dict[str, Any]
    ctx: Any
    pd: Any
    cq: Any
    qp: Any

    def mr(self, buf: np.ndarray, access: int = RW, offset: int = 0,
           length: int | None = None) -> Any:
        """Register part of a tracked numpy buffer."""
        n = buf.nbytes - offset if length is None else length
        return self.mods["pyverbs.mr"].MR(self.pd, n, access,
                                          address=buf.ctypes.data + offset)

    def buffer(self, nbytes: int, fill: int | None = None, name: str = "") -> np.ndarray:
        arr = np.zeros(nbytes, dtype=np.uint8) if fill is None else \
            (np.arange(nbytes) * 7 + fill).astype(np.uint8)
        self.node.track(arr, name=name)
        return arr

    def sge(self, addr: int, length: int, lkey: int) -> Any:
        return self.mods["pyverbs.wr"].SGE(addr, length, lkey)

    def send_wr(self, opcode: int, sges: list[Any], *, wr_id: int = 1, rkey: int = 0,
                remote: int = 0, flags: int | None = None) -> Any:
        W = self.mods["pyverbs.wr"]
        kwargs: dict[str, Any] = {}
        if flags is not None:
            kwargs["send_flags"] = flags
        wr = W.SendWR(wr_id=wr_id, opcode=opcode, num_sge=len(sges), sg=sges, **kwargs)
        if rkey or remote:
            wr.set_wr_rdma(rkey, remote)
        return wr

    def poll_all(self) -> list[Any]:
        _n, wcs = self.cq.poll(64)
        return list(wcs)


def make_side(node: Node, dev: str = "mlx5_0", *, sq_sig_all: int = 1,
              max_send_wr: int = 16, access: int = RW) -> Side:
    """A PD, CQ and RC QP in INIT; the QP's access flags are set at INIT, as rdma-core's
    tests do (pyverbs' to_rtr/to_rts do not carry IBV_QP_ACCESS_FLAGS)."""
    m = node.modules
    ctx = m["pyverbs.device"].Context(name=dev)
    pd = m["pyverbs.pd"].PD(ctx)
    cq = m["pyverbs.cq"].CQ(ctx, 256)
    Q = m["pyverbs.qp"]
    cap = Q.QPCap(max_send_wr=max_send_wr, max_recv_wr=16, max_send_sge=4, max_recv_sge=4)
    init = Q.QPInitAttr(qp_type=int(ibv_qp_type.IBV_QPT_RC), scq=cq, rcq=cq, cap=cap,
                        sq_sig_all=sq_sig_all)
    attr = Q.QPAttr()
    attr.qp_access_flags = access
    qp = Q.QP(pd, init, attr)
    return Side(node, m, ctx, pd, cq, qp)


def connect(x: Side, y: Side, *, access: int = RW) -> None:
    """Move ``x``'s QP to RTS, aimed at ``y``'s QP by GID (RoCE style)."""
    Q, Ad = x.mods["pyverbs.qp"], x.mods["pyverbs.addr"]
    attr = Q.QPAttr()
    attr.qp_access_flags = access
    attr.max_rd_atomic = attr.max_dest_rd_atomic = 1   # READs need both (rxe)
    attr.dest_qp_num = y.qp.qp_num
    gid = y.ctx.query_gid(1, 0)
    attr.ah_attr = Ad.AHAttr(is_global=1, gr=Ad.GlobalRoute(dgid=gid), port_num=1)
    x.qp.to_rts(attr)


@pytest.fixture
def fabric() -> Fabric:
    """Two nodes, one mlx5 NIC each."""
    f = Fabric(("a", "b"))
    f.add_device("mlx5_0", "mlx5", node="a")
    f.add_device("mlx5_0", "mlx5", node="b")
    return f


@pytest.fixture
def pair(fabric: Fabric) -> tuple[Side, Side]:
    """Connected RC QPs: a <-> b."""
    a, b = make_side(fabric.node("a")), make_side(fabric.node("b"))
    connect(a, b)
    connect(b, a)
    return a, b


@pytest.fixture
def kit() -> Any:
    """The helpers above, for tests that build their own sides (conftest is not importable
    under --import-mode=importlib)."""
    import types

    return types.SimpleNamespace(make_side=make_side, connect=connect, RW=RW, Side=Side)
