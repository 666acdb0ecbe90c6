"""Supervised execution: the code under test runs in worker processes, never in the judge's.

A :class:`Supervisor` keeps up to ``jobs`` workers (``multiprocessing`` processes, forked so
they start in milliseconds with kvreg, torch and the implementation already imported; or
started early, before the scenarios are loaded, importing torch themselves meanwhile),
sends each a scenario over a pipe and waits, with ``multiprocessing.connection.wait``, for
its result, its death, or the time limit. Whatever the implementation does, every scenario
gets a verdict: a worker that exits, is killed by a signal (a segfault through ctypes, the
OOM killer), or overruns the time limit is replaced, and its scenario gets an ``error``
verdict whose reason says what happened, in which step and buffer, and after how many calls
(read from the memory the worker shares, :mod:`.progress`). A healthy worker is reused
for the next scenario of the same process configuration (harness/run/process.py: the
environment and machine a scenario fixes, which code may read once), and for one of another
configuration when the worker finds it the same deployment to the code under test (nothing
outside kvreg read what differs; :class:`~.worker.Reconfigure`); each scenario builds its
own fake, and what the code keeps across scenarios reaches the current one through the
fakes' doors (fakes/doors.py), so a verdict does not depend on what ran before it in the same
worker.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import time
from collections import deque
from collections.abc import Iterable, Iterator
from contextlib import suppress
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any

from .implementation import Implementation
from .lifecycle import death_reason, exited, preload
from .limits import Limits
from .process import process_config
from .progress import ProgressBlock, describe_calls, read_calls
from .result import ScenarioResult
from .sharding import expected_cost
from .target import ProcessConfig
from .worker import PRELOADED, READY, Reconfigure, worker_main

if TYPE_CHECKING:
    from kvreg.harness.scenario.format import Scenario

__all__ = ["Supervisor"]


_GRACE_S = 5.0     # how long a worker whose pipe closed may take to exit


@dataclass
class _Worker:
    process: Any
    conn: Connection
    block: ProgressBlock
    job: tuple[int, Scenario] | None = None
    deadline: float = 0.0
    config: ProcessConfig | None = None


def _cost(sc: Scenario) -> float:
    """The expected cost of ``sc`` (0 when it cannot be estimated: it fails fast anyway)."""
    try:
        return expected_cost(sc)
    except Exception:
        return 0.0


class Supervisor:
    """Runs scenarios in supervised worker processes; see the module docstring."""

    def __init__(self, impl: Implementation, *, backend: Any = "fake",
                 limits: Limits | None = None, jobs: int = 1) -> None:
        self.impl = impl
        self.backend = backend
        self.limits = limits or Limits()
        self.jobs = max(1, jobs)
        # fork: a worker starts with everything imported (measured: a few ms, where spawn
        # and forkserver pay a fresh interpreter and torch import per worker)
        self._ctx = multiprocessing.get_context("fork")
        self._workers: list[_Worker] = []
        self.started = 0            # workers started so far (the first ones and replacements)

    # -- workers ---------------------------------------------------------------------------
    def _fork(self, config: ProcessConfig | None) -> _Worker:
        """A new worker of ``config``, or an early one (None: its configuration comes with
        the first scenario it is given, :meth:`start_early`)."""
        block = self._ctx.RawValue(ProgressBlock)
        ours, theirs = self._ctx.Pipe()
        process = self._ctx.Process(target=worker_main, name="kvreg-worker", daemon=True,
                                    args=(theirs, block, self.impl, self.backend, self.limits,
                                          config), kwargs={"early": config is None})
        # frozen objects are skipped by the worker's collector: it never walks (and so never
        # copies-on-write) the pages of everything it inherited; measured: the catalog's
        # scenarios run 1.2-2x faster in a worker forked this way
        gc.freeze()
        try:
            process.start()
        finally:
            gc.unfreeze()
        theirs.close()
        self.started += 1
        worker = _Worker(process, ours, block, config=config)
        self._workers.append(worker)
        return worker

    def _start(self, config: ProcessConfig) -> _Worker:
        preload()     # imported once here, inherited by every worker forked from now on
        worker = self._fork(config)
        # wait while it prepares (harness/run/process.py): that time is no scenario's
        self._wait_ready(worker)
        return worker

    def _wait_ready(self, worker: _Worker) -> None:
        """Wait (at most the time limit) for ``worker`` to be prepared; a worker that dies
        meanwhile is seen by its first scenario."""
        with suppress(EOFError, OSError):
            if worker.conn.poll(self.limits.timeout):
                worker.conn.recv()

    def start_early(self) -> None:
        """Start ``jobs`` workers (at most one per core: more would only slow each other's
        imports) before the scenarios are known, so that they import torch and the fakes
        while this process still loads the scenarios (on two cores the two overlap), and
        this process need not import torch at all. Each takes the configuration of the
        first scenario it is given; one never given any is killed by :meth:`close`."""
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
        for _ in range(min(self.jobs, cores) - len(self._workers)):
            self._fork(None)

    def _retire(self, worker: _Worker, *, kill: bool) -> None:
        if kill and worker.process.is_alive():
            worker.process.kill()
        worker.process.join(None if kill else 5)
        if worker.process.is_alive():
            worker.process.kill()
            worker.process.join()
        worker.conn.close()
        self._workers.remove(worker)

    def _switched(self, worker: _Worker, config: ProcessConfig) -> bool:
        """Whether ``worker`` (idle) accepts to serve ``config`` from now on (an early one
        always does: it is prepared for it as :meth:`_start` prepares a new one)."""
        if worker.config is None:
            try:
                # its imports are what this process would have done before forking: no
                # scenario's time, so waited for without a limit (until done, or its death)
                if worker.conn.recv() != PRELOADED:
                    raise EOFError
                worker.conn.send(Reconfigure(config))
            except (EOFError, OSError, ValueError):
                self._retire(worker, kill=True)
                return False
            worker.config = config
            # then prepared for ``config`` as one forked for it is (_start)
            self._wait_ready(worker)
            return True
        try:
            worker.conn.send(Reconfigure(config))
            answer = worker.conn.recv() if worker.conn.poll(self.limits.timeout) else None
        except (EOFError, OSError, ValueError):
            answer = None
        if answer == READY:
            worker.config = config
            return True
        if answer is None:       # no answer in time, or the pipe closed: not a worker to keep
            self._retire(worker, kill=True)
        return False

    def _idle(self, config: ProcessConfig) -> _Worker | None:
        """An idle worker of ``config``: a kept one, one of another configuration that
        accepts this one, else a new one (in place of an idle worker of another
        configuration when all ``jobs`` are started)."""
        other = None
        others = []
        for w in list(self._workers):
            if w.job is None:
                if not w.process.is_alive():
                    self._retire(w, kill=True)     # died between scenarios: nothing to blame
                elif w.config == config:
                    return w
                else:
                    others.append(w)
        for w in others:
            if self._switched(w, config):
                return w
            if w in self._workers:
                other = w
        if len(self._workers) >= self.jobs and other is not None:
            with suppress(OSError, ValueError):
                other.conn.send(None)
            self._retire(other, kill=False)
        if len(self._workers) < self.jobs:
            return self._start(config)
        return None

    def _assign(self, worker: _Worker, job: tuple[int, Scenario]) -> bool:
        try:
            worker.conn.send(job[1])
        except (OSError, ValueError):
            self._retire(worker, kill=True)
            return False
        worker.job = job
        worker.deadline = time.monotonic() + self.limits.timeout
        return True

    # -- one worker's outcome --------------------------------------------------------------
    def _outcome(self, w: _Worker, ready: list[Any]) -> tuple[int, ScenarioResult] | None:
        assert w.job is not None
        index, sc = w.job
        if w.conn in ready or w.process.sentinel in ready:
            try:
                if w.conn.poll():
                    message = w.conn.recv()
                    if message == READY:    # prepared later than _start waited: keep waiting
                        return None
                    result, healthy = message
                    w.job = None
                    if not healthy:      # its result is in: nothing left to wait for
                        self._retire(w, kill=True)
                    return index, result
            except Exception:
                pass     # the pipe closed (the worker is ending), or holds no result
            if exited(w.process, _GRACE_S):
                reason = death_reason(w.process.exitcode, timed_out=False, limits=self.limits)
            else:     # alive without its pipe or sentinel: the code closed or wrote them
                w.process.kill()
                w.process.join()
                reason = "the implementation broke the pipe between kvreg and its worker process"
        elif time.monotonic() >= w.deadline:
            w.process.kill()
            w.process.join()
            reason = death_reason(None, timed_out=True, limits=self.limits)
        else:
            return None
        where = ProgressBlock.from_buffer_copy(w.block)
        detail = f"{where.step.decode(errors='replace')}, {describe_calls(read_calls(where))}"
        w.job = None
        self._retire(w, kill=True)
        return index, ScenarioResult(sc.id, sc.pool, "error", reason=f"{reason} {detail}",
                                     guards=sc.guards)

    # -- public ----------------------------------------------------------------------------
    def run(self, scenarios: Iterable[Scenario]) -> Iterator[tuple[int, ScenarioResult]]:
        """(position, result) for every scenario, in the order they finish.

        With several workers the costliest scenarios start first (longest-processing-time
        first), so that no worker is left with a long one at the end while the others idle.
        """
        jobs = list(enumerate(scenarios))
        configs = {index: process_config(sc) for index, sc in jobs}
        # one configuration's scenarios together (each change of configuration starts a
        # worker), in catalog order within it, or costliest first with several workers
        first: dict[ProcessConfig, int] = {}
        for index, _ in jobs:
            first.setdefault(configs[index], index)
        jobs.sort(key=lambda job: (first[configs[job[0]]],
                                   -_cost(job[1]) if self.jobs > 1 else job[0]))
        pending = deque(jobs)
        while pending or any(w.job is not None for w in self._workers):
            while pending:
                job = pending[0]
                worker = self._idle(configs[job[0]])
                if worker is None:
                    break
                pending.popleft()
                if not self._assign(worker, job):
                    pending.appendleft(job)
            busy = [w for w in self._workers if w.job is not None]
            if not busy:
                continue
            now = time.monotonic()
            timeout = max(0.0, min(w.deadline for w in busy) - now)
            ready = wait([w.conn for w in busy] + [w.process.sentinel for w in busy], timeout)
            for w in busy:
                outcome = self._outcome(w, list(ready))
                if outcome is not None:
                    yield outcome

    def run_one(self, sc: Scenario) -> ScenarioResult:
        """One scenario's result (the pytest items use this)."""
        for _, result in self.run([sc]):
            return result
        raise AssertionError("unreachable: run() yields one result per scenario")

    def in_flight(self) -> list[int]:
        """Positions of the scenarios running right now."""
        return [w.job[0] for w in self._workers if w.job is not None]

    def close(self) -> None:
        """Stop every worker: idle ones are asked to leave, busy ones and early ones never
        given a scenario (they may still be importing) are killed."""
        for w in list(self._workers):
            if w.job is None and w.config is not None:
                with suppress(OSError, ValueError):
                    w.conn.send(None)
                self._retire(w, kill=False)
            else:
                self._retire(w, kill=True)

    def __enter__(self) -> Supervisor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
