"""The worker side of a supervised run: one child process that runs scenarios on request.

The worker receives a scenario over its pipe, runs it with a fresh fake (the runner builds
one per scenario), and sends back the judged result. Its steps and call counts go to
shared memory (:mod:`.progress`), so when it dies the supervisor still knows where it
was. A scenario the implementation ends with an exception that is not an ``Exception``
(``SystemExit``, ``KeyboardInterrupt``, ``MemoryError`` past the limit…) becomes an error
verdict sent back before the worker exits; so does a run that leaves threads running. The
supervisor then starts a fresh worker, so no later scenario runs in a process the
implementation left in an unknown state. Asked to serve another process configuration
(:class:`Reconfigure`), a worker answers :data:`READY` when that one is the same deployment
to the code under test (harness/run/process.py: :func:`~.process.same_deployment`), and
:data:`DECLINED` otherwise (it then keeps serving its own). A worker started before the
selection is known (``early``: while the supervisor still loads the scenarios) imports what
every run imports itself, and takes its configuration from the first :class:`Reconfigure`.
"""

from __future__ import annotations

import faulthandler
import gc
import os
import resource
import signal
import threading
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from kvreg.fakes.doors import PROCESS

from .core import run_scenario
from .implementation import Implementation
from .lifecycle import die_with_parent, preload
from .limits import Limits, TimeLimitExceeded
from .process import (
    apply_config_env,
    import_conflict,
    note_env_reads,
    prepare_worker,
    same_deployment,
    watched_values,
)
from .progress import Progress, SharedProgress, describe_calls
from .result import ScenarioResult, internal_error, whole_message
from .target import ProcessConfig

if TYPE_CHECKING:
    from kvreg.harness.scenario.format import Scenario

__all__ = ["DECLINED", "PRELOADED", "READY", "Reconfigure", "ended_by", "run_in_process",
           "worker_main"]

READY = "kvreg-worker-ready"   # what a worker sends once it can take scenarios
DECLINED = "kvreg-worker-declined"   # another configuration is another deployment here
PRELOADED = "kvreg-worker-preloaded"   # an early worker imported what every run imports


@dataclass(frozen=True)
class Reconfigure:
    """The supervisor's request: serve scenarios of ``config`` from now on."""

    config: ProcessConfig


def _data_segment() -> int:
    """The data segment size of this process in bytes (VmData), 0 when unknown."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmData:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _limit_memory(limit: int) -> None:
    """Let the data segment grow by at most ``limit`` bytes from here (RLIMIT_DATA)."""
    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    soft = _data_segment() + limit
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))


def _unlimit_memory() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    resource.setrlimit(resource.RLIMIT_DATA, (hard, hard))


def ended_by(exc: BaseException, sc: Scenario, progress: Progress,
             limits: Limits) -> ScenarioResult:
    """The error verdict of a run that an exception the runner does not judge ended.

    An ``Exception`` here escaped the runner itself (the runner judges every one the
    implementation raises): it is kvreg's, the internal-error verdict."""
    if isinstance(exc, Exception) and not isinstance(exc, MemoryError):
        return internal_error(ScenarioResult(sc.id, sc.pool, "pass", guards=sc.guards), exc,
                              progress.where)
    where = f"{progress.where}, {describe_calls(progress.calls())}"
    if isinstance(exc, TimeLimitExceeded):
        what = f"the implementation did not finish within {limits.time_text()}"
    elif isinstance(exc, SystemExit):
        what = f"the implementation ended the process with sys.exit({exc.code!r})"
    elif isinstance(exc, KeyboardInterrupt):
        what = "the implementation raised KeyboardInterrupt"
    elif isinstance(exc, MemoryError):
        who = "the implementation" if progress.in_implementation else "the run"
        what = f"{who} ran out of memory: {limits.memory_text()} was hit"
    else:   # a BaseException of the implementation's own (GeneratorExit, its own classes)
        text = whole_message(exc)
        what = f"the implementation raised {type(exc).__name__}" + (f": {text}" if text else "")
    return ScenarioResult(sc.id, sc.pool, "error", reason=f"{what} {where}", guards=sc.guards)


def _prepared(impl: Implementation, config: ProcessConfig) -> tuple[Implementation, str | None]:
    """The implementation imported anew under ``config`` (harness/run/process.py), and why
    no scenario of ``config`` can run in this process (None: they all can)."""
    try:
        impl = prepare_worker(config, impl.reloaded)
    except Exception as exc:
        return impl, f"importing the implementation anew for this configuration failed: {exc}"
    return impl, import_conflict(list(impl.import_reads), config)


def _become_worker(early: bool) -> None:
    die_with_parent()
    # Ctrl-C in a terminal reaches the whole process group: the supervisor handles it
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # a crash is reported by the supervisor in one line, not as a dump of every thread
    faulthandler.disable()
    # what the implementation prints must never end up in a report written to stdout
    os.dup2(2, 1)
    if early:
        # what the supervisor imports before it forks a worker, imported here instead while
        # the supervisor loads the scenarios
        preload()


def _first_config(conn: Connection) -> ProcessConfig | None:
    """An early worker's configuration: the supervisor's first message (None: it left),
    asked for once what every run imports is imported (:data:`PRELOADED`)."""
    try:
        conn.send(PRELOADED)
        first = conn.recv()
    except (EOFError, OSError):
        return None
    return first.config if isinstance(first, Reconfigure) else None


def worker_main(conn: Connection, block: Any, impl: Implementation, backend: Any,
                limits: Limits, config: ProcessConfig | None = None, *,
                early: bool = False) -> None:
    """Serve scenarios until the pipe closes or a run leaves the process unfit for another.

    With a ``config``, this process is one deployment of it: its environment is set and the
    implementation imported anew before the first scenario (harness/run/process.py), and
    the supervisor sends it only scenarios of that configuration, or of another one it
    accepted (:class:`Reconfigure`). An ``early`` worker gets its ``config`` from the
    supervisor's first message, a :class:`Reconfigure`, and is then prepared the same way.
    """
    _become_worker(early)
    progress = SharedProgress(block)
    read = note_env_reads()
    base = watched_values()     # what a fresh worker of any configuration starts with
    refusal = None
    if early:
        config = _first_config(conn)
        if config is None:
            return
    if config is not None:
        impl, refusal = _prepared(impl, config)
    if early:
        # frozen, as the supervisor freezes what a forked worker inherits (torch, kvreg, the
        # implementation): this process's collector never walks it
        gc.freeze()
    try:
        conn.send(READY)   # the preparation is not the first scenario's time
    except (OSError, ValueError):
        return
    while True:
        try:
            sc = conn.recv()
        except (EOFError, OSError):
            return
        if sc is None:
            return
        if isinstance(sc, Reconfigure):
            # the variables the implementation's load read count too (in the supervisor)
            seen = read | {key for key, _, _ in impl.import_reads}
            # (a worker that refuses its own configuration's scenarios is not reused)
            if config is None or refusal is not None or not same_deployment(
                    config, sc.config, base, seen, only_kvreg=impl.sources is None):
                conn.send(DECLINED)
                continue
            config = sc.config
            apply_config_env(config, base)
            refusal = import_conflict(list(impl.import_reads), config)
            conn.send(READY)
            continue
        progress.reset()
        if refusal is not None:
            conn.send((ScenarioResult(sc.id, sc.pool, "error", reason=f"kvreg cannot run this "
                                      f"scenario: {refusal}", guards=sc.guards), True))
            continue
        threads = threading.active_count()
        healthy = True
        try:
            _limit_memory(limits.memory)
            try:
                result = run_scenario(sc, impl, backend=backend, progress=progress,
                                      rank_timeout=limits.timeout)
            finally:
                _unlimit_memory()
        except BaseException as exc:
            result = ended_by(exc, sc, progress, limits)
            healthy = False
        # threads the implementation left running could act during the next scenario
        healthy = healthy and threading.active_count() <= threads
        conn.send((result, healthy))
        if not healthy:
            return


def run_in_process(sc: Scenario, impl: Implementation, backend: Any,
                   limits: Limits) -> ScenarioResult:
    """One scenario in this process, without a supervisor (``--in-process``, for debugging).

    The process serves every configuration here: configuration the implementation read
    once (harness/run/process.py) is not set per scenario; supervised runs do that.

    The time limit still holds while Python code runs, and the exceptions a worker reports
    are reported the same way; an ``os._exit`` or a crash ends this process, and
    ``KeyboardInterrupt`` propagates so that Ctrl-C still interrupts the whole run.
    """
    PROCESS.carry = True   # one process for every scenario, as a worker is
    progress = Progress()
    try:
        return run_scenario(sc, impl, backend=backend, progress=progress,
                            timeout=limits.timeout)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        return ended_by(exc, sc, progress, limits)
