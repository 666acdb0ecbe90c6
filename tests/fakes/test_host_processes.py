"""Real rank processes on one fake host: every charge is host-wide and atomic.

Four processes (forked, as a launcher's workers are) open the same host by path, each with its
own ``FakeCuda``, and register at once; the host-wide totals are exact, and a host that holds
three of four pools refuses the fourth with the real code (docs/host.md §5). No timing is
asserted: barriers order the steps.
"""

from __future__ import annotations

import fcntl
import multiprocessing as mp
import os
from pathlib import Path
from typing import Any

import pytest

from kvreg.fakes.cuda.fake_cuda import FakeCuda
from kvreg.fakes.cuda.host_pins import attach_host
from kvreg.fakes.host.fake_host import FakeHost
from kvreg.fakes.host.limits import HostLimits

GiB = 1 << 30
TiB = 1 << 40
N = 4
POOL = 256 * GiB      # below the 512 GiB a single registration may pin (R580+)
SHARED = 128 * GiB
CTX = mp.get_context("fork")
WAIT = 120      # seconds a barrier waits before the test fails instead of hanging


@pytest.fixture(scope="module", autouse=True)
def _warm() -> None:
    """The first no-RAM buffer of a process sets up its reserved memory once: done here, the
    forked ranks inherit it instead of each paying for it."""
    FakeCuda().virtual(4096)


def _register_pool(path: str, rank: int, size: int, shared: int, start: Any, done: Any,
                   out: Any) -> None:
    """One rank: its own pool of ``size`` bytes and, if ``shared``, the shared region."""
    host = FakeHost(path)
    pins = attach_host(FakeCuda(), host.rank(rank))
    rt = pins.fake.cuda_runtime
    pool = pins.fake.virtual(size)
    region = pins.fake.virtual(shared) if shared else None
    if region is not None and rank == 0:
        pins.memory.shm_create("kv")
        pins.memory.shm_ftruncate("kv", shared)
    start.wait(WAIT)
    if region is not None:
        pins.memory.map_shm("kv", region.data_ptr(), shared)
    free_before = rt.mem_get_info()[1]
    codes = [rt.host_register(pool.data_ptr(), size, 0)]
    if region is not None:
        codes.append(rt.host_register(region.data_ptr(), shared, 0))
    out.put((rank, codes, free_before - rt.mem_get_info()[1]))
    done.wait(WAIT)          # stay alive (and pinned) while the parent reads the totals
    pins.memory.exit()


def _run(path: Path, size: int, shared: int = 0) -> tuple[dict[int, Any], FakeHost, Any]:
    start, done, out = CTX.Barrier(N), CTX.Barrier(N + 1), CTX.Queue()
    procs = [CTX.Process(target=_register_pool,
                         args=(str(path), r, size, shared, start, done, out))
             for r in range(N)]
    for p in procs:
        p.start()
    results = {}
    for _ in range(N):
        rank, codes, gpu_cost = out.get(timeout=WAIT)
        results[rank] = (codes, gpu_cost)
    return results, FakeHost(path), (done, procs)


def _finish(handle: Any) -> None:
    done, procs = handle
    done.wait(WAIT)
    for p in procs:
        p.join(WAIT)
        assert p.exitcode == 0


def test_four_ranks_pin_at_once_and_the_totals_are_exact(tmp_path: Path) -> None:
    path = tmp_path / "host.json"
    FakeHost.create(path, HostLimits(ram=2 * TiB, shm=TiB))
    results, host, handle = _run(path, POOL, shared=SHARED)
    try:
        assert {r: codes for r, (codes, _) in results.items()} == {r: [0, 0] for r in range(N)}
        # page tables: 8 bytes per 4 KiB page of what each rank registered
        assert {cost for _, cost in results.values()} == {(POOL + SHARED) // 512}
        t = host.totals()
        assert t.pinned == N * POOL + SHARED      # the shared region once
        assert t.anon == N * POOL and t.shm == SHARED
        assert [host.rank_pinned(r) for r in range(N)] == [POOL + SHARED] * N
        assert host.shm_files()["kv"]["mapped_by"] == list(range(N))
    finally:
        _finish(handle)
    t = host.totals()
    assert (t.pinned, t.anon, t.shm) == (0, 0, SHARED)    # the never-unlinked file stays
    assert list(host.shm_files()) == ["kv"]


def test_a_host_that_holds_three_pools_refuses_the_fourth(tmp_path: Path) -> None:
    path = tmp_path / "host.json"
    # pinnable: 1 TiB less 128 GiB in ZONE_MOVABLE = 3.5 pools
    FakeHost.create(path, HostLimits(ram=TiB, movable=128 * GiB))
    results, host, handle = _run(path, POOL)
    try:
        codes = sorted(codes[0] for codes, _ in results.values())
        assert codes == [0, 0, 0, 1]       # GUP -ENOMEM -> NV_ERR_INVALID_ADDRESS -> 1
        refused = next(r for r, (c, _) in results.items() if c[0])
        assert results[refused][1] == 0    # nothing registered: no page tables either
        t = host.totals()
        assert t.pinned == 3 * POOL and host.rank_pinned(refused) == 0
    finally:
        _finish(handle)


def _pin_shared(path: str, rank: int, serialize: bool, begun: Any, out: Any) -> None:
    memory = FakeHost(path).rank(rank)
    if rank == 0:
        memory.shm_create("kv")
        memory.shm_ftruncate("kv", 64 * GiB)
    begun.wait(WAIT)
    memory.map_shm("kv", 0x7000_0000_0000, 64 * GiB)
    if serialize:   # the fix of 1Cat-vLLM PR #598: an exclusive flock around registration
        fd = os.open(f"{path}.kv-register", os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        code = memory.pin(0x7000_0000_0000, 64 * GiB)
        os.close(fd)
    else:           # every rank is in flight before any finishes
        ticket = memory.begin_pin(0x7000_0000_0000, 64 * GiB)
        begun.wait(WAIT)
        code = memory.finish_pin(ticket)
    out.put((rank, code))


def _shared_codes(tmp_path: Path, serialize: bool) -> dict[int, int]:
    path = tmp_path / f"host-{serialize}.json"
    FakeHost.create(path, HostLimits(ram=TiB, concurrent_shared_pin_fails=True))
    begun, out = CTX.Barrier(N), CTX.Queue()
    procs = [CTX.Process(target=_pin_shared, args=(str(path), r, serialize, begun, out))
             for r in range(N)]
    for p in procs:
        p.start()
    codes = dict(out.get(timeout=WAIT) for _ in range(N))
    for p in procs:
        p.join(WAIT)
        assert p.exitcode == 0
    return codes


def test_concurrent_pins_of_shared_pages_fail_and_serialized_ones_pass(tmp_path: Path) -> None:
    assert _shared_codes(tmp_path, serialize=False) == {r: 1 for r in range(N)}
    assert _shared_codes(tmp_path, serialize=True) == {r: 0 for r in range(N)}


def _meet(path: str, name: str, parties: int, out: Any) -> None:
    out.put(FakeHost(path).rendezvous(name, parties, WAIT))


def test_ranks_meet_before_they_register_and_a_missing_peer_never_holds_them(
        tmp_path: Path) -> None:
    """FakeHost.rendezvous: the ranks of a many-rank scenario start their registers together
    (so pins that race overlap on any machine); a peer that never comes costs the others
    the timeout, not a hang."""
    host = FakeHost.create(tmp_path / "host.json", HostLimits(ram=TiB))
    out = CTX.Queue()
    procs = [CTX.Process(target=_meet, args=(str(host.state.path), "register", N, out))
             for _ in range(N)]
    for p in procs:
        p.start()
    assert sorted(out.get(timeout=WAIT) for _ in range(N)) == [True] * N
    for p in procs:
        p.join(WAIT)
    assert host.rendezvous("alone", 2, 0.05) is False      # the second party never came
