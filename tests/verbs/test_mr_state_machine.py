"""MR lifecycles against a simple model (docs/mooncake-verbs.md §5.2): a Hypothesis state machine.

Registrations on two devices of one node — an mlx5 (no size limit, MKEY exhaustion EAGAIN)
and an erdma-like NIC (64 KiB max_mr_size enforced with EINVAL, exhaustion ENOMEM) — with
oversized, zero-length, bad-access and out-of-buffer requests, deregistration and double
deregistration, under an RLIMIT_MEMLOCK that each MR is charged against.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule

from kvreg.fakes.verbs import PAGE_SIZE, Fabric, PyverbsRDMAError
from kvreg.fakes.verbs.enums import ibv_access_flags as A

BUF = 1 << 20
MEMLOCK = 96 * PAGE_SIZE
LIMITS = {"mlx": None, "erd": 64 << 10}          # enforced max_mr_size per device
MAX_MR = {"mlx": 5, "erd": 4}
EXHAUSTED = {"mlx": errno.EAGAIN, "erd": errno.ENOMEM}
ACCESS = [int(A.IBV_ACCESS_LOCAL_WRITE),
          int(A.IBV_ACCESS_LOCAL_WRITE | A.IBV_ACCESS_REMOTE_WRITE | A.IBV_ACCESS_REMOTE_READ),
          int(A.IBV_ACCESS_REMOTE_WRITE)]             # the last one is invalid (§5.2)


@dataclass
class Held:
    mr: Any
    device: str
    pages: int


def _pages(addr: int, length: int) -> int:
    first = addr // PAGE_SIZE
    last = (addr + length + PAGE_SIZE - 1) // PAGE_SIZE
    return last - first


class MRLifecycle(RuleBasedStateMachine):
    mrs = Bundle("mrs")

    def __init__(self) -> None:
        super().__init__()
        self.fabric = Fabric(())
        node = self.fabric.add_node("n", memlock_limit=MEMLOCK)
        self.fabric.add_device("mlx", "mlx5", node="n", max_mr=MAX_MR["mlx"])
        self.fabric.add_device("erd", "erdma", node="n", max_mr=MAX_MR["erd"],
                               max_mr_size=LIMITS["erd"])
        m = node.modules
        self.MR = m["pyverbs.mr"].MR
        self.pds = {d: m["pyverbs.pd"].PD(m["pyverbs.device"].Context(name=d))
                    for d in ("mlx", "erd")}
        self.buf = node.virtual(BUF, name="pool")
        self.node = node
        self.live: dict[int, Held] = {}          # id(mr) -> model entry

    def _expected(self, device: str, addr: int, length: int, access: int) -> int:
        """The model: §5.2 rows in the kernel's order of checks."""
        if access == ACCESS[2]:
            return errno.EINVAL
        if length == 0:
            return errno.EINVAL
        limit = LIMITS[device]
        if limit is not None and length > limit:
            return errno.EINVAL
        pinned = sum(h.pages for h in self.live.values())
        if pinned + _pages(addr, length) > MEMLOCK // PAGE_SIZE:
            return errno.ENOMEM
        if addr + length > self.buf.data_ptr() + BUF:
            return errno.EFAULT
        if sum(1 for h in self.live.values() if h.device == device) >= MAX_MR[device]:
            return EXHAUSTED[device]
        return 0

    @rule(target=mrs, device=st.sampled_from(["mlx", "erd"]),
          offset=st.integers(0, BUF - 1), length=st.integers(0, 160 << 10),
          access=st.sampled_from(ACCESS))
    def register(self, device: str, offset: int, length: int, access: int) -> Any:
        addr = self.buf.data_ptr() + offset
        want = self._expected(device, addr, length, access)
        try:
            mr = self.MR(self.pds[device], length, access, address=addr)
        except PyverbsRDMAError as exc:
            assert exc.error_code == want, (exc, want)
            return None
        assert want == 0, f"expected errno {want}, got an MR"
        self.live[id(mr)] = Held(mr, device, _pages(addr, length))
        return mr

    @rule(mr=mrs)
    def deregister(self, mr: Any) -> None:
        if mr is None:
            return
        # a second close (double dereg) is a no-op in pyverbs: no error, nothing changes
        mr.close()
        self.live.pop(id(mr), None)

    @invariant()
    def fabric_matches_model(self) -> None:
        assert self.node.pinned_pages == sum(h.pages for h in self.live.values())
        live = self.fabric.live_mrs()
        assert sorted((m.device, m.addr, m.length) for m in live) == sorted(
            (h.device, h.mr.buf, h.mr.length) for h in self.live.values())
        for name, nic in self.node.nics.items():
            assert nic.pinned_bytes == PAGE_SIZE * sum(
                h.pages for h in self.live.values() if h.device == name)

    def teardown(self) -> None:
        for held in list(self.live.values()):
            held.mr.close()
        assert self.fabric.live_mrs() == [] and self.node.pinned_pages == 0


TestMRLifecycle = MRLifecycle.TestCase
