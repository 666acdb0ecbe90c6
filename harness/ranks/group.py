"""A group of N rank processes for one process configuration, started once and reused.

Start-up: the ranks are forked from a process that has already imported torch (as the
supervisor's workers are, harness/run/supervisor.py), so a group of eight costs eight forks
and one gloo rendezvous, not eight torch imports; the group then serves call after call
(benchmarks/test_bench_ranks.py gives the figures).

Failure: the caller waits on every rank's pipe and process sentinel at once
(``multiprocessing.connection.wait``), so a rank's death is seen the moment it happens, even
while its peers wait for it in a barrier that can never complete. As torchrun's agent does
when a worker fails [DOC: docs.pytorch.org/docs/stable/elastic/agent.html, "upon detecting
worker failures or unhealthiness, tears down all workers"], the ranks still running are then
killed and reported ``stopped``; past the call's timeout every rank still running is killed
and reported ``hung``. A group that lost a rank is torn down and started afresh by the next
call: a gloo group cannot take a replacement member (docs/ranks.md §2).
"""

from __future__ import annotations

import gc
import multiprocessing
import socket
import time
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection, wait
from typing import Any

from kvreg.harness.run.lifecycle import death_reason, exited, preload
from kvreg.harness.run.limits import Limits

from .environment import loopback_listener
from .outcome import RankOutcome, died, stopped
from .rank_process import FAILED, READY, RankSetup, rank_main

__all__ = ["DEFAULT_CALL_TIMEOUT_S", "RankGroup", "RankStartError", "close_all"]

DEFAULT_CALL_TIMEOUT_S = 60.0
_GRACE_S = 5.0       # how long a rank whose pipe closed, or that was asked to leave, may take


class RankStartError(RuntimeError):
    """The ranks could not start or join their process group: kvreg's failure, never a
    verdict on the code under test (no code of it ran yet)."""


@dataclass
class _Rank:
    process: Any
    conn: Connection


def _receive(rank: _Rank) -> Any:
    """The message waiting on ``rank``'s pipe, None when the pipe closed or holds none."""
    try:
        return rank.conn.recv() if rank.conn.poll() else None
    except (EOFError, OSError):
        return None


def _end(ranks: Sequence[_Rank], *, kill: bool) -> None:
    """End the ranks' processes: killed, or asked to leave and killed past the grace time.
    Every rank is asked before any is waited for, so their exits overlap (one at a time,
    a group of 8 took about a second to close: the end of every catalog run with ranks)."""
    if not kill:
        for rank in ranks:
            with suppress(OSError, ValueError):
                rank.conn.send(None)
        deadline = time.monotonic() + _GRACE_S
        for rank in ranks:
            rank.process.join(max(deadline - time.monotonic(), 0))
    for rank in ranks:
        if rank.process.is_alive():
            rank.process.kill()
        rank.process.join()
        rank.conn.close()


class RankGroup:
    """N rank processes that run one function each per :meth:`run`; see the module doc.

    ``env`` is the process configuration (set in every rank before it joins);
    ``collective_timeout`` bounds gloo's own waits, far above any call's timeout, since the
    group detects a dead rank itself."""

    def __init__(self, world_size: int, *, env: Mapping[str, str] | None = None,
                 start_timeout: float = 120.0, collective_timeout: float = 1800.0) -> None:
        if world_size < 1:
            raise ValueError(f"a rank group needs at least one rank; got {world_size}")
        self.world_size = world_size
        self.env = dict(env or {})
        self.start_timeout = start_timeout
        self.collective_timeout = collective_timeout
        self.starts = 0        # how many times the processes were started (first and restarts)
        # fork: a rank starts with torch imported (see harness/run/supervisor.py)
        self._ctx = multiprocessing.get_context("fork")
        self._ranks: list[_Rank] = []

    @property
    def pids(self) -> list[int]:
        """The rank processes' ids, by rank (empty while no group is started)."""
        return [rank.process.pid for rank in self._ranks]

    # -- start -----------------------------------------------------------------------------
    def start(self) -> None:
        """Start the ranks and wait until every one has joined, unless a healthy group runs;
        a group that lost a process meanwhile is replaced."""
        if self._ranks and all(rank.process.is_alive() for rank in self._ranks):
            return
        self.close(kill=True)
        preload()
        import torch.distributed  # noqa: F401  (imported once here, inherited by every rank)

        listener = loopback_listener()
        try:
            self._fork(listener)
        finally:
            listener.close()      # rank 0's store holds its own copy
        self.starts += 1
        self._await_joined()

    def _fork(self, listener: socket.socket) -> None:
        port = listener.getsockname()[1]
        pipes = [self._ctx.Pipe() for _ in range(self.world_size)]
        parent_ends = [ours.fileno() for ours, _ in pipes]
        # frozen objects are not walked by the ranks' collector, so their pages stay shared
        gc.freeze()
        try:
            for rank, (ours, theirs) in enumerate(pipes):
                siblings = [t.fileno() for r, (_, t) in enumerate(pipes) if r != rank]
                foreign = tuple(parent_ends + siblings + ([listener.fileno()] if rank else []))
                setup = RankSetup(rank, self.world_size, port,
                                  listener.fileno() if rank == 0 else None, self.env,
                                  self.collective_timeout)
                process = self._ctx.Process(target=rank_main, name=f"kvreg-rank-{rank}",
                                            args=(theirs, setup, foreign), daemon=True)
                process.start()
                self._ranks.append(_Rank(process, ours))
        finally:
            gc.unfreeze()
            for _, theirs in pipes:
                theirs.close()

    def _await_joined(self) -> None:
        """Wait for every rank's READY; any other end fails the start with its reason."""
        deadline = time.monotonic() + self.start_timeout
        waiting = set(range(self.world_size))
        while waiting:
            ready = wait(self._handles(waiting), max(0.0, deadline - time.monotonic()))
            if not ready:
                self._fail_start(f"ranks {sorted(waiting)} did not join the process group "
                                 f"within {self.start_timeout:g} s")
            for index in sorted(waiting):
                message = self._ready_message(index, ready)
                if message is None:
                    continue
                if message[0] != READY:
                    self._fail_start(f"rank {index} could not join the process group: "
                                     f"{message[1]}")
                waiting.discard(index)

    def _ready_message(self, index: int, ready: list[Any]) -> tuple[str, Any] | None:
        rank = self._ranks[index]
        if rank.conn not in ready and rank.process.sentinel not in ready:
            return None
        message = _receive(rank)
        if message is None and exited(rank.process, _GRACE_S):
            return FAILED, death_reason(rank.process.exitcode, timed_out=False, limits=Limits())
        return None if message is None else (str(message[0]), message[1])

    def _fail_start(self, text: str) -> None:
        self.close(kill=True)
        raise RankStartError(text)

    def _handles(self, indices: Sequence[int] | set[int]) -> list[Any]:
        return [h for i in sorted(indices) for h in (self._ranks[i].conn,
                                                     self._ranks[i].process.sentinel)]

    # -- calls -----------------------------------------------------------------------------
    def run(self, fn: str, args_per_rank: Sequence[tuple[Any, ...]] | None = None,
            timeout: float = DEFAULT_CALL_TIMEOUT_S) -> list[RankOutcome]:
        """Call ``fn`` (``module:function``, imported in the ranks) with ``args_per_rank[r]``
        in rank ``r``, and return every rank's outcome, by rank, within ``timeout`` seconds
        (plus the time to kill what is left). The group is kept for the next call unless a
        rank's process ended or was killed."""
        args = list(args_per_rank) if args_per_rank is not None else [()] * self.world_size
        if len(args) != self.world_size:
            raise ValueError(f"{len(args)} argument tuples for {self.world_size} ranks")
        self.start()
        outcomes: dict[int, RankOutcome] = {}
        for index, rank in enumerate(self._ranks):
            with suppress(OSError, ValueError):   # it died since the start: its end is read below
                rank.conn.send((fn, tuple(args[index])))
        try:
            self._collect(outcomes, time.monotonic() + timeout, timeout)
        except BaseException:       # Ctrl-C: a rank's late answer must not be the next call's
            self.close(kill=True)
            raise
        outcomes = _after_death(outcomes)
        if not all(o.kind in ("returned", "raised") and o.exc_type not in _LEAVING
                   for o in outcomes.values()):
            self.close(kill=True)    # a process ended or was killed: a fresh group next time
        return [outcomes[index] for index in range(self.world_size)]

    def _collect(self, outcomes: dict[int, RankOutcome], deadline: float,
                 timeout: float) -> None:
        """Fill ``outcomes`` for every rank: read, stop the rest after a failure, or call
        the rest hung at the deadline."""
        while len(outcomes) < self.world_size:
            pending = [i for i in range(self.world_size) if i not in outcomes]
            first = next((o for o in sorted(outcomes.values(), key=_failed_order)
                          if not o.ok), None)
            if first is not None:
                self._stop(pending, first, outcomes)
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._kill(pending)
                why = death_reason(None, timed_out=True, limits=Limits(timeout=timeout))
                outcomes.update({i: RankOutcome(i, "hung", reason=f"rank {i}: {why}")
                                 for i in pending})
                return
            ready = wait(self._handles(pending), remaining)
            for index in pending:
                outcome = self._read(index, ready)
                if outcome is not None:
                    outcomes[index] = outcome

    def _stop(self, pending: list[int], first: RankOutcome,
              outcomes: dict[int, RankOutcome]) -> None:
        """Read what the ranks in ``pending`` already sent, then kill the others as stopped
        by ``first``'s failure."""
        ready = wait(self._handles(pending), 0)
        for index in pending:
            outcome = self._read(index, ready)
            if outcome is not None:
                outcomes[index] = outcome
        rest = [i for i in pending if i not in outcomes]
        self._kill(rest)
        outcomes.update({i: stopped(i, first) for i in rest})

    def _read(self, index: int, ready: list[Any]) -> RankOutcome | None:
        """Rank ``index``'s outcome if its pipe or sentinel is ready, else None."""
        rank = self._ranks[index]
        if rank.conn not in ready and rank.process.sentinel not in ready:
            return None
        message = _receive(rank)
        if message is not None:
            return _from_message(index, message)
        if not exited(rank.process, _GRACE_S):    # alive without its pipe: the code closed it
            rank.process.kill()
            rank.process.join()
            return died(index, None, "the code closed the pipe between kvreg and its rank "
                                     "process")
        code = rank.process.exitcode
        return died(index, code, death_reason(code, timed_out=False, limits=Limits()))

    def _kill(self, indices: Sequence[int]) -> None:
        for index in indices:
            process = self._ranks[index].process
            if process.is_alive():
                process.kill()
            process.join()

    # -- end -------------------------------------------------------------------------------
    def close(self, *, kill: bool = False) -> None:
        """End every rank: asked to leave (they leave the process group first), or killed."""
        close_all([self], kill=kill)

    def __enter__(self) -> RankGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def close_all(groups: Sequence[RankGroup], *, kill: bool = False) -> None:
    """:meth:`RankGroup.close` of every group at once: all their ranks asked (or killed)
    before any is waited for (measured: three groups of 2, 4 and 8 ranks closed in 0.09 s
    together, 0.16 s one group after another)."""
    _end([rank for group in groups for rank in group._ranks], kill=kill)
    for group in groups:
        group._ranks = []


# a rank that raised one of these has left (harness/ranks/rank_process.py)
_LEAVING = ("SystemExit", "KeyboardInterrupt")


def _failed_order(outcome: RankOutcome) -> tuple[int, int]:
    """Which failure a stopped rank names: a death before a raise (a death is what leaves
    the others waiting), then the lowest rank."""
    return (0 if outcome.kind in ("exited", "killed") else 1, outcome.rank)


def _after_death(outcomes: dict[int, RankOutcome]) -> dict[int, RankOutcome]:
    """A rank that raised while another rank's process died is reported stopped by that
    death, its exception kept: gloo raises in the peers of a dead rank ("Connection reset
    by peer") in a race with kvreg's stop, and a report must not depend on who won it."""
    dead = sorted(o.rank for o in outcomes.values() if o.kind in ("exited", "killed"))
    if not dead:
        return outcomes
    first = outcomes[dead[0]]
    return {i: replace(stopped(i, first), exc_type=o.exc_type, message=o.message,
                       traceback=o.traceback) if o.kind == "raised" else o
            for i, o in outcomes.items()}


def _from_message(index: int, message: tuple[str, Any]) -> RankOutcome:
    kind, payload = message
    if kind == "returned":
        return RankOutcome(index, "returned", value=payload)
    exc_type, text, trace = payload
    return RankOutcome(index, "raised", exc_type=exc_type, message=text, traceback=trace,
                       reason=f"rank {index} raised {exc_type}" + (f": {text}" if text else ""))
