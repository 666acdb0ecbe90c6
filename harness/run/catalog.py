"""Run a selection of scenarios for ``kvreg run``: supervised workers, Ctrl-C, the report file.

Every scenario gets a result, whatever happens: the supervisor (:mod:`.supervisor`) turns
a dying or endless implementation into an ``error`` verdict, and Ctrl-C turns the scenarios
not finished yet into ``skip`` verdicts that say so, so that the report written afterwards
is complete. Reports are written atomically (a temporary file in the same folder, then
``os.replace``): a reader never sees half a file, even when the run is interrupted.
"""

from __future__ import annotations

import os
import signal
import tempfile
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .implementation import Implementation
from .limits import Limits
from .result import ScenarioResult
from .supervisor import Supervisor
from .worker import run_in_process

if TYPE_CHECKING:
    from kvreg.harness.scenario.format import Scenario

__all__ = ["INTERRUPTED", "NOT_RUN", "CatalogRun", "restore_sigint", "run_catalog",
           "write_atomic"]

INTERRUPTED = "interrupted (Ctrl-C) while this scenario ran"
NOT_RUN = "not run: the run was interrupted (Ctrl-C) before this scenario started"


@dataclass
class CatalogRun:
    """The results in selection order, and whether Ctrl-C ended the run early."""

    results: list[ScenarioResult]
    interrupted: bool


def run_catalog(scenarios: Sequence[Scenario], impl: Implementation, *, jobs: int = 1,
                limits: Limits | None = None, backend: Any = "fake", in_process: bool = False,
                tick: Callable[[int], None] | None = None,
                supervisor: Supervisor | None = None) -> CatalogRun:
    """Run every scenario (supervised unless ``in_process``); never raises KeyboardInterrupt.

    ``supervisor``: one made (and maybe started early) by the caller for this run; it is
    closed here as one made here would be.

    After Ctrl-C, SIGINT stays ignored so that the caller can write its report in peace;
    the caller restores it (:func:`restore_sigint`) once the report is written.
    """
    limits = limits or Limits()
    slots: list[ScenarioResult | None] = [None] * len(scenarios)
    started: set[int] = set()
    done = 0
    interrupted = False
    try:
        if in_process:
            for i, sc in enumerate(scenarios):
                started.add(i)
                slots[i] = run_in_process(sc, impl, backend, limits)
                done += 1
                if tick is not None:
                    tick(done)
        else:
            if supervisor is None:
                supervisor = Supervisor(impl, backend=backend, limits=limits, jobs=jobs)
            for i, result in supervisor.run(scenarios):
                slots[i] = result
                done += 1
                if tick is not None:
                    tick(done)
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        interrupted = True
    finally:
        if supervisor is not None:
            if interrupted:
                started = set(supervisor.in_flight())
            supervisor.close()
    results = []
    for i, sc in enumerate(scenarios):
        done_result = slots[i]
        if done_result is None:
            reason = INTERRUPTED if i in started else NOT_RUN
            done_result = ScenarioResult(sc.id, sc.pool, "skip", reason=reason,
                                         guards=sc.guards)
        results.append(done_result)
    return CatalogRun(results, interrupted)


def restore_sigint() -> None:
    """Ctrl-C raises KeyboardInterrupt again (after :func:`run_catalog` ignored it)."""
    signal.signal(signal.SIGINT, signal.default_int_handler)


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that a reader sees the old file or the whole new one."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or ".")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise
