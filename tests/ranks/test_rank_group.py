"""harness/ranks: N real rank processes under real ``torch.distributed`` (gloo, loopback).

What is pinned: the ranks agree through real collectives and see torchrun's variables
[DOC: docs.pytorch.org/docs/stable/elastic/run.html, "Environment Variables"]; the processes
are started once and reused; every way a rank fails (raises, ``os._exit``, SIGKILL while its
peers wait in a barrier, never returns) comes back as that rank's outcome and the call
returns; every socket a rank holds is on 127.0.0.1; closing leaves no process. Timeouts are
upper bounds of a hang, never asserted on.
"""

from __future__ import annotations

import ipaddress
import os
import signal
import time
from collections.abc import Iterator
from typing import Any

import psutil  # type: ignore[import-untyped]
import pytest

from kvreg.harness.ranks import RankGroup, RankStartError, rank_process
from kvreg.harness.ranks.environment import omp_threads

pytest.importorskip("torch.distributed")
HANG_S = 3.0          # how long a call waits for a rank that never returns
CALL_S = 120.0        # an upper bound only: the calls here end in well under a second


@pytest.fixture
def children() -> Iterator[None]:
    """Every test here must leave no process of its own behind."""
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    yield
    left = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
    assert not left, f"processes left: {[(p.pid, p.name()) for p in left]}"


@pytest.mark.parametrize("world", [2, 4])
def test_min_all_reduce_and_barrier(world: int, children: None) -> None:
    with RankGroup(world) as group:
        values = [(10 + 7 * r) % (world + 3) + 1 for r in range(world)]
        outcomes = group.run("rank_probes:agree_min", [(v,) for v in values], timeout=CALL_S)
        port = outcomes[0].value["env"]["MASTER_PORT"]
    for rank, outcome in enumerate(outcomes):
        assert outcome.ok, outcome.reason
        assert outcome.rank == rank
        assert outcome.value["min"] == min(values)
        assert (outcome.value["rank"], outcome.value["world"]) == (rank, world)
        assert outcome.value["env"] == {
            "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(rank),
            "LOCAL_WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port}
    assert int(port) > 0


def test_processes_are_started_once_across_calls(children: None) -> None:
    with RankGroup(2) as group:
        pids = [[o.value for o in group.run("rank_probes:pid", timeout=CALL_S)]
                for _ in range(3)]
        assert group.starts == 1
        assert pids[0] == pids[1] == pids[2] == group.pids
        assert len(set(pids[0])) == 2 and os.getpid() not in pids[0]


def _kinds(outcomes: list[Any]) -> list[tuple[int, str]]:
    return [(o.rank, o.kind) for o in outcomes]


def test_a_rank_that_raises_stops_the_ranks_waiting_for_it(children: None) -> None:
    with RankGroup(3) as group:
        outcomes = group.run("rank_probes:raise_on", [(1,)] * 3, timeout=CALL_S)
        assert _kinds(outcomes) == [(0, "stopped"), (1, "raised"), (2, "stopped")]
        assert (outcomes[1].exc_type, outcomes[1].message) == ("ValueError", "rank 1 refuses")
        assert "raise_on" in outcomes[1].traceback
        assert outcomes[0].reason == "stopped: rank 1 raised ValueError"
        assert outcomes[2].cause == 1
        # the stopped ranks were killed: the next call runs in a fresh group
        again = group.run("rank_probes:agree_min", [(5,), (3,), (4,)], timeout=CALL_S)
        assert [o.value["min"] for o in again] == [3, 3, 3]
        assert group.starts == 2


def test_a_raise_leaves_the_rank_fit_for_the_next_call(children: None) -> None:
    with RankGroup(1) as group:      # one rank: no peer is stopped by its raise
        outcomes = group.run("rank_probes:unpicklable", timeout=CALL_S)
        assert _kinds(outcomes) == [(0, "raised")]
        assert "cannot be sent back" in outcomes[0].message
        assert group.run("rank_probes:pid", timeout=CALL_S)[0].value == group.pids[0]
        assert group.starts == 1


@pytest.mark.parametrize(("probe", "kind", "code"), [
    ("exit_on", "exited", 1), ("sigkill_on", "killed", -signal.SIGKILL)])
def test_a_rank_that_dies_in_front_of_a_barrier(probe: str, kind: str, code: int,
                                                children: None) -> None:
    with RankGroup(4) as group:
        outcomes = group.run(f"rank_probes:{probe}", [(2,)] * 4, timeout=CALL_S)
        assert _kinds(outcomes) == [(0, "stopped"), (1, "stopped"), (2, kind), (3, "stopped")]
        assert outcomes[2].exitcode == code
        assert outcomes[2].reason.startswith("rank 2: the implementation")
        # the peers are stopped by kvreg or raise gloo's "Connection reset by peer" first:
        # either way they are reported stopped by rank 2's death, what they raised kept
        assert {o.reason for o in outcomes if o.rank != 2} == {"stopped: rank 2 died"}
        assert {o.exc_type for o in outcomes if o.rank != 2} <= {"", "RuntimeError"}
        assert group.pids == []        # torn down; the next call starts afresh
        assert all(o.ok for o in group.run("rank_probes:noop", timeout=CALL_S))
        assert group.starts == 2


def test_a_rank_that_never_returns_is_hung_and_the_call_returns(children: None) -> None:
    with RankGroup(2) as group:
        outcomes = group.run("rank_probes:sleep_on", [(0,)] * 2, timeout=HANG_S)
        assert _kinds(outcomes) == [(0, "hung"), (1, "hung")]   # rank 1 waits in the barrier
        assert "did not finish within the time limit of 3 s" in outcomes[0].reason
        assert group.pids == []


def _off_loopback(pid: int) -> list[str]:
    """Every inet socket of ``pid`` bound or connected to an address other than 127.0.0.1
    (an IPv4-mapped ``::ffff:127.0.0.1`` is 127.0.0.1)."""
    def loopback(ip: str) -> bool:
        address = ipaddress.ip_address(ip)
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
            address = address.ipv4_mapped
        return str(address) == "127.0.0.1"
    bad = []
    for conn in psutil.Process(pid).net_connections(kind="inet"):
        ends = [conn.laddr] + ([conn.raddr] if conn.raddr else [])
        bad += [f"{conn.laddr} -> {conn.raddr} ({conn.status})"
                for end in ends if not loopback(end.ip)]
    return bad


def test_every_socket_of_every_rank_is_on_loopback(children: None) -> None:
    with RankGroup(4) as group:
        group.run("rank_probes:agree_min", [(1,)] * 4, timeout=CALL_S)
        counts = [len(psutil.Process(p).net_connections(kind="inet")) for p in group.pids]
        assert all(count >= 2 for count in counts), counts    # the store's and gloo's
        assert {pid: _off_loopback(pid) for pid in group.pids} == {p: [] for p in group.pids}
        # the check catches a socket on every interface
        group.run("rank_probes:listen_everywhere", timeout=CALL_S)
        assert all("0.0.0.0" in " ".join(_off_loopback(p)) for p in group.pids)


def _join_by_port(setup: Any) -> None:
    """A broken join: the store opened by port, as most launch code does."""
    import datetime

    import torch.distributed as dist

    if setup.listen_fd is not None:
        os.close(setup.listen_fd)
    for _ in range(1000):     # until the caller has closed its copy of the port's socket
        try:
            store = dist.TCPStore(  # type: ignore[attr-defined]
                "127.0.0.1", setup.port, setup.world_size, setup.rank == 0,
                datetime.timedelta(seconds=CALL_S))
            break
        except RuntimeError:
            time.sleep(0.01)
    dist.init_process_group("gloo", store=store, rank=setup.rank, world_size=setup.world_size)


def test_the_loopback_check_catches_a_store_opened_by_port(monkeypatch: pytest.MonkeyPatch,
                                                           children: None) -> None:
    monkeypatch.setattr(rank_process, "_join", _join_by_port)   # the forked ranks inherit it
    with RankGroup(2) as group:
        assert all(o.ok for o in group.run("rank_probes:agree_min", [(1,)] * 2,
                                           timeout=CALL_S))
        # the store listens on every interface: '::' (dual stack), or '0.0.0.0' where torch's
        # IPv6 bind lost the race with the caller's copy of the port and it fell back to IPv4
        assert any(line.startswith(("addr(ip='::'", "addr(ip='0.0.0.0'"))
                   for line in _off_loopback(group.pids[0])), _off_loopback(group.pids[0])


def test_the_configuration_environment_reaches_every_rank(children: None) -> None:
    with RankGroup(2, env={"KVREG_RANKS_PROBE": "on"}) as group:
        outcomes = group.run("os:getenv", [("KVREG_RANKS_PROBE",)] * 2, timeout=CALL_S)
    assert [o.value for o in outcomes] == ["on", "on"]
    assert "KVREG_RANKS_PROBE" not in os.environ


def test_bad_arguments_are_refused_before_any_rank_starts() -> None:
    with pytest.raises(ValueError, match="at least one rank"):
        RankGroup(0)
    group = RankGroup(2)
    with pytest.raises(ValueError, match="1 argument tuples for 2 ranks"):
        group.run("rank_probes:noop", [()])
    assert group.starts == 0


def test_threads_per_rank_as_torchrun_sets_them() -> None:
    """torchrun: OMP_NUM_THREADS=1 per process with more than one per node, unless set
    [DOC: torch/distributed/run.py, 2.13]."""
    assert omp_threads(8, {}, None) == "1"
    assert omp_threads(1, {}, None) is None
    assert omp_threads(8, {}, "4") == "4"
    assert omp_threads(8, {"OMP_NUM_THREADS": "2"}, "4") == "2"


@pytest.mark.parametrize("env", [{}, {"OMP_NUM_THREADS": "2"}])
def test_every_rank_runs_with_those_threads(env: dict[str, str], children: None) -> None:
    expected = omp_threads(2, env, os.environ.get("OMP_NUM_THREADS"))
    with RankGroup(2, env=env) as group:
        outcomes = group.run("torch:get_num_threads", timeout=CALL_S)
        variables = group.run("os:getenv", [("OMP_NUM_THREADS",)] * 2, timeout=CALL_S)
    assert expected is not None
    assert [o.value for o in outcomes] == [int(expected)] * 2
    assert [o.value for o in variables] == [expected] * 2


def _refuse_to_join(setup: Any) -> None:
    if setup.rank == 1:
        raise RuntimeError("no store")


def _die_while_joining(setup: Any) -> None:
    if setup.rank == 1:
        os._exit(3)
    _JOIN(setup)


_JOIN = rank_process._join


@pytest.mark.parametrize(("join", "text"), [
    (_refuse_to_join, "rank 1 could not join the process group: RuntimeError: no store"),
    (_die_while_joining, "rank 1 could not join the process group: the implementation ended "
                         "the process with os._exit(3)")])
def test_a_rank_that_cannot_join_fails_the_start_and_leaves_nothing(
        join: Any, text: str, monkeypatch: pytest.MonkeyPatch, children: None) -> None:
    monkeypatch.setattr(rank_process, "_join", join)     # the forked ranks inherit it
    group = RankGroup(3, start_timeout=CALL_S)
    with pytest.raises(RankStartError) as caught:
        group.run("rank_probes:noop", timeout=CALL_S)
    assert str(caught.value) == text
    assert group.pids == []


@pytest.mark.parametrize(("spec", "error"), [("rank_probes", "ValueError"),
                                             ("rank_probes:absent", "AttributeError"),
                                             ("kvreg_no_such_module:f", "ModuleNotFoundError")])
def test_a_function_that_cannot_be_found_is_raised_in_every_rank(spec: str, error: str,
                                                                 children: None) -> None:
    with RankGroup(1) as group:
        outcomes = group.run(spec, timeout=CALL_S)
    assert _kinds(outcomes) == [(0, "raised")]
    assert outcomes[0].exc_type == error


def test_an_interrupted_call_leaves_no_answer_for_the_next(monkeypatch: pytest.MonkeyPatch,
                                                           children: None) -> None:
    def interrupted(*args: Any) -> None:
        raise KeyboardInterrupt
    with RankGroup(2) as group:
        group.start()
        monkeypatch.setattr(group, "_collect", interrupted)
        with pytest.raises(KeyboardInterrupt):
            group.run("rank_probes:pid", timeout=CALL_S)
        assert group.pids == []
        monkeypatch.undo()
        outcomes = group.run("rank_probes:pid", timeout=CALL_S)
        assert [o.value for o in outcomes] == group.pids and group.starts == 2
