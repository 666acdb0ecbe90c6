"""Run one scenario against one implementation, and judge it; the same flow for every target.

The flow (design.md "One scenario, end to end"): the scenario's target builds its world (a
fresh fake with the scenario's profile and fault plan, the pool's buffers), then every buffer
is registered through the implementation, every page moved, the pool torn down as often as
the scenario says (its later rounds only for code that declares a repeatable teardown,
:mod:`.contract`), and the target's checks judge the record. Everything the run changes is
restored whatever happens; a call budget ends implementations that loop through the runtime
(kvreg's own calls are not counted), the supervisor's time and memory limits
(:mod:`.supervisor`) the others. kvreg's own failures are its verdicts, never the code's:
an exception inside kvreg is ``internal-error``; a real API the fake does not model,
reached by the code, is an ``error`` naming it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kvreg.fakes.doors import retire_scope
from kvreg.fakes.not_modelled import reached

from .callsite import CallSites, locate
from .causes import dedupe
from .isolation import capture_logs, wall_guard
from .progress import Progress
from .result import INTERNAL_ERROR, CallBudgetExceeded, ScenarioResult, internal_error
from .target import CannotRun, SkipScenario, World
from .targets import get_target

if TYPE_CHECKING:
    from kvreg.harness.scenario.format import Scenario

    from .implementation import Implementation

__all__ = ["judge_run", "run_scenario"]


def run_scenario(sc: Scenario, impl: Implementation, *, keep_trace: bool = False,
                 backend: Any = "fake", progress: Progress | None = None,
                 timeout: float | None = None,
                 rank_timeout: float | None = None) -> ScenarioResult:
    """Run and judge one scenario in this process (a scenario of several ranks: in rank
    processes of a group this process starts, harness/ranks/scenario.py, within
    ``timeout`` or else ``rank_timeout``, the supervisor's limit on this process).

    Returns a verdict for whatever the implementation returns or raises as an
    ``Exception``; ``SystemExit``, ``KeyboardInterrupt``, ``MemoryError`` and a spent
    ``timeout`` (:class:`~.limits.TimeLimitExceeded`) propagate: a supervised worker
    (:mod:`.worker`) turns them into an error verdict. An exception of kvreg's own (its
    world, its copy step, its checks) is the ``internal-error`` verdict, with its traceback:
    never a cause in the code under test. ``progress`` is told each step and counts each
    call. ``backend`` is "fake" (default), "cuda" (CUDA scenarios on the real runtimes
    through kvreg.realhw: the pool is materialised in real memory, or the scenario is skipped
    with the reason when the machine cannot hold it), or a RealCuda-like object (tests use
    stand-ins). Targets without a real backend ignore it.
    """
    progress = progress or Progress()
    if sc.ranks > 1:
        # rank processes on one fake host: harness/ranks runs this same flow in every rank
        # (judge_run) and makes one result of theirs
        from kvreg.harness.ranks.scenario import run_ranked

        return run_ranked(sc, impl, keep_trace=keep_trace, backend=backend,
                          progress=progress, timeout=timeout or rank_timeout)
    target = get_target(sc.target)
    return judge_run(sc, impl, lambda: target.build(sc, impl, backend),
                     keep_trace=keep_trace, progress=progress, timeout=timeout)


def judge_run(sc: Scenario, impl: Implementation, build: Callable[[], World], *,
              keep_trace: bool = False, progress: Progress | None = None,
              timeout: float | None = None) -> ScenarioResult:
    """The flow of :func:`run_scenario` in this process on the world ``build()`` makes (a
    rank process builds its rank's world, harness/ranks/rank_scenario.py)."""
    progress = progress or Progress()
    with retire_scope() as scope, reached() as gaps:
        result = _run(sc, impl, build, keep_trace=keep_trace, progress=progress,
                      timeout=timeout)
        stale = list(scope.stale)
    if result.verdict == INTERNAL_ERROR:
        return result
    if stale:
        # the code reached a fake this scenario did not build: nothing it did says anything
        # about the code's own registration, so no rule may judge it
        result.verdict, result.violations = "error", []
        result.reason = ("kvreg cannot judge this run: a call reached a fake that is not this "
                         f"scenario's ({len(stale)} such call(s)): {stale[0]}")
    elif gaps:
        # what the real API would have answered is unknown: the rest of the run took a path
        # the real machine may not have taken
        first = gaps[0]
        others = sorted({g.api for g in gaps} - {first.api})
        result.verdict, result.violations = "error", []
        result.reason = (f"kvreg cannot judge this run: the code called {first.api}, which "
                         "kvreg's fake does not model"
                         + (f" (and {', '.join(others)})" if others else "")
                         + f"; to model it, add {first.docs}")
    return result


def _after_register(world: World, sc: Scenario, progress: Progress) -> None:
    """The steps that run once register returned: the pool's first fill, the transfers."""
    if "fill" in sc.exercise:
        progress.step("the pool's first fill")
        world.fill()
    if "transfers" in sc.exercise:
        progress.step("the page transfers")
        world.transfer()


def _run(sc: Scenario, impl: Implementation, build: Callable[[], World], *, keep_trace: bool,
         progress: Progress, timeout: float | None) -> ScenarioResult:
    start = time.perf_counter()
    result = ScenarioResult(sc.id, sc.pool, "pass", guards=sc.guards)
    contract = impl.contract
    try:
        world = build()
    except SkipScenario as exc:
        result.verdict, result.reason = "skip", str(exc)
        return result
    except CannotRun as exc:
        result.verdict, result.reason = "error", f"kvreg cannot run this scenario: {exc}"
        return result
    except MemoryError:
        raise
    except Exception as exc:
        return internal_error(result, exc, "while it built the scenario's world")
    try:
        sites = CallSites(impl)      # where in the code under test each violation happened
        world.watch(sites.progress(progress))
        impl = sites.wrap()
        with world.isolation(), wall_guard(timeout), capture_logs() as logs:
            world.set_logs(logs)
            ok = world.register(impl)
            if ok:
                _after_register(world, sc, progress)
            world.begin_teardown()
            rounds = [step for step in sc.exercise if step.startswith("teardown")]
            # the real machine tears down again only where the code's own caller does: the
            # later rounds bind only code that declares a repeatable teardown (or a world
            # whose teardown is the real API's own repeatable call: a store's close)
            repeat = contract.repeatable or bool(getattr(world, "teardown_repeatable", False))
            for rnd, step in enumerate(rounds if repeat else rounds[:1]):
                world.teardown(impl, rnd, step)
    except CallBudgetExceeded:
        world.budget_spent()
    except MemoryError:
        raise
    except Exception as exc:
        # the world runs the implementation's calls inside its own handlers: what reaches
        # here is kvreg's (its copy step, its isolation, its bookkeeping)
        return internal_error(result, exc, progress.where)
    progress.step("the checks of the run")
    try:
        world.finish()
        result.violations = dedupe(locate(world.judge(), sites))
        result.warnings = dedupe(locate(world.warnings(), sites))
        result.calls = world.calls()
        result.copy = world.copy_coverage()
        if keep_trace or result.violations:
            result.trace_text = world.trace_text(200)
    except MemoryError:
        raise
    except Exception as exc:
        return internal_error(result, exc, "during the checks of the run")
    result.verdict = "fail" if result.violations else "pass"
    result.seconds = time.perf_counter() - start
    return result
