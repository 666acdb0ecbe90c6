"""Where the ranks of a fake host meet (fakes/host/meetings.py): a rank the host's OOM killer
took counts as arrived, since it never comes; a rank is known by its number, so one that
arrived and was killed after counts once. The many-rank scenarios' fill step rests on it
(harness/cuda/ranked.py): the ranks fill in rank order, each after the lower ranks' fills
ended or their ranks were killed, and meet once every fill has ended; meanwhile a rank has
given up its pid (``RankMemory.set_pid``), so a victim learns its kill there instead of dying
by a peer's SIGKILL. No timing is asserted:
a wait that must end is given the tests' long bound, one that must not a short one."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from kvreg.fakes.host.fake_host import FakeHost, OomKilled
from kvreg.fakes.host.limits import HostLimits

GiB, TiB = 1 << 30, 1 << 40
CTX = mp.get_context("fork")
WAIT = 120      # seconds a wait that must end may take before the test fails
SHORT = 0.05    # seconds given to a wait that must not end


def _host(tmp_path: Path) -> FakeHost:
    return FakeHost.create(tmp_path / "host", HostLimits(ram=TiB))


def _oom_kill(host: FakeHost, victim: int, killer: int) -> None:
    """``victim`` faults 600 GiB in, then ``killer`` as much: the host (1 TiB) cannot hold
    both, and its OOM killer takes the victim, the most resident (docs/host.md §1)."""
    host.rank(victim).touch(TiB, 600 * GiB)
    host.rank(killer).touch(2 * TiB, 600 * GiB)
    assert list(host.killed()) == [victim]


def test_a_rank_the_oom_killer_took_counts_as_arrived(tmp_path: Path) -> None:
    host = _host(tmp_path)
    host.rank(0)
    assert host.rendezvous("before", 2, SHORT, rank=1) is False    # rank 0 lives, never came
    _oom_kill(host, victim=0, killer=1)
    assert host.rendezvous("after", 2, WAIT, rank=1) is True


def test_a_rank_that_arrived_and_was_killed_after_counts_once(tmp_path: Path) -> None:
    host = _host(tmp_path)
    meeting = host.meeting("filled")
    meeting.arrive(0)
    _oom_kill(host, victim=0, killer=2)
    assert meeting.wait(SHORT, parties=2) is False      # rank 1 has not come
    meeting.arrive(1)
    assert meeting.wait(WAIT, parties=2) is True
    assert meeting.arrivals() == [b"0", b"1"]


def test_callers_without_a_rank_are_counted(tmp_path: Path) -> None:
    host = _host(tmp_path)
    _oom_kill(host, victim=0, killer=1)
    # an arrival that gives no rank may be the killed rank's: it is never matched to it
    assert host.rendezvous("plain", 3, SHORT) is False
    assert host.rendezvous("plain", 3, WAIT) is True


def test_a_rank_waits_for_the_ranks_named_each_arrived_or_killed(tmp_path: Path) -> None:
    """The fill's order: rank 2 waits for ranks 0 and 1; rank 0 arrives, rank 1 is killed
    before its turn (a lower rank's fill took it)."""
    host = _host(tmp_path)
    meeting = host.meeting("filled")
    assert meeting.wait(WAIT, ranks=()) is True          # rank 0 waits for no one
    assert meeting.wait(SHORT, ranks=range(2)) is False
    meeting.arrive(0)
    assert meeting.wait(SHORT, ranks=range(2)) is False
    _oom_kill(host, victim=1, killer=3)
    assert meeting.wait(WAIT, ranks=range(2)) is True
    with pytest.raises(OomKilled):
        host.rank(1).touch(TiB, GiB)     # the victim learns it at its next call


def _wait_in(path: str, out: Any) -> None:
    out.put(FakeHost(path).rendezvous("filled", 2, WAIT, rank=1))


def test_a_kill_releases_a_peer_already_waiting(tmp_path: Path) -> None:
    """Rank 1 waits in its own process for rank 0, which a third rank's fault then kills:
    the wait ends met, not at its bound."""
    host = _host(tmp_path)
    host.rank(0).touch(TiB, 600 * GiB)
    out = CTX.Queue()
    waiter = CTX.Process(target=_wait_in, args=(str(host.state.path), out))
    waiter.start()
    host.rank(2).touch(2 * TiB, 600 * GiB)
    assert list(host.killed()) == [0]
    assert out.get(timeout=WAIT) is True
    waiter.join(WAIT)
    assert waiter.exitcode == 0


def test_a_meeting_name_is_a_plain_word(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="plain word"):
        _host(tmp_path).meeting("../x")


def _victim(path: str, signalled: bool, ready: Any, killed: Any, out: Any) -> None:
    memory = FakeHost(path).rank(0, pid=os.getpid())
    if not signalled:
        memory.set_pid(None)     # as a scenario's rank from its register to the fills' end
    memory.touch(TiB, 600 * GiB)
    ready.set()
    killed.poll(WAIT)
    out.put(0 in memory.host.killed())      # still running: it learns it now


@pytest.mark.parametrize("signalled", [True, False])
def test_a_rank_without_its_pid_learns_its_kill_instead_of_dying(tmp_path: Path,
                                                                   signalled: bool) -> None:
    """With its pid the victim's process is sent SIGKILL by the rank whose fault did not fit;
    without it (``RankMemory.set_pid(None)``) it runs on and learns it at its next look."""
    host = _host(tmp_path)
    # "killed" is a pipe, not an Event: Event.set waits for every process asleep in wait()
    # to wake, and a victim SIGKILLed there never does (a CI run hung so)
    ready, out = CTX.Event(), CTX.Queue()
    killed, tell_killed = CTX.Pipe(duplex=False)
    victim = CTX.Process(target=_victim,
                         args=(str(host.state.path), signalled, ready, killed, out))
    victim.start()
    assert ready.wait(WAIT)
    host.rank(1).touch(2 * TiB, 600 * GiB)
    assert list(host.killed()) == [0]
    tell_killed.send(True)
    victim.join(WAIT)
    if signalled:
        assert victim.exitcode == -signal.SIGKILL
    else:
        assert (out.get(timeout=WAIT), victim.exitcode) == (True, 0)
