"""Run one many-rank scenario (``ranks = N``): N rank processes on one fake host, one result.

The parent side, called by harness/run/core.py's ``run_scenario`` in the process that would
have run a single-rank scenario (a supervised worker, or kvreg's own with ``--in-process``):
it creates the scenario's host (fakes/host, a state file in a temporary folder), runs
rank_scenario.py's ``run_rank`` in every rank of a :class:`~.group.RankGroup` (one group per
world size and process configuration, started once and reused by the scenarios after it,
closed when the process ends) and makes one :class:`ScenarioResult` of theirs: each rank's
verdict and violations under ``ranks``, the scenario's verdict the worst of them and of the
cross-rank rules (checks.py). A rank that died, hung or broke inside kvreg is an ``error``
naming the rank and what happened; the group's timeout comes before the supervisor's, so a
hung rank is named, never a hung run (docs/ranks.md §2-§3).
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from multiprocessing import util
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvreg.fakes.host.fake_host import FakeHost
from kvreg.fakes.host.limits import HostLimits
from kvreg.harness.run.process import process_config
from kvreg.harness.run.progress import Progress
from kvreg.harness.run.result import ScenarioResult, Violation

from .checks import RanksRun, check_ranks, demand_and_capacity
from .group import DEFAULT_CALL_TIMEOUT_S, RankGroup, RankStartError, close_all
from .outcome import RankOutcome

if TYPE_CHECKING:
    from kvreg.harness.run.implementation import Implementation
    from kvreg.harness.scenario.format import Scenario

__all__ = ["RANK_FUNCTION", "close_groups", "group_for", "run_ranked"]

RANK_FUNCTION = "kvreg.harness.ranks.rank_scenario:run_rank"
_SEVERITY = ("skip", "pass", "fail", "error", "internal-error")
_GROUPS: dict[tuple[int, tuple[tuple[str, str], ...]], RankGroup] = {}
_OWNER = [os.getpid()]     # the process whose children the groups' ranks are
# the share of the time limit the ranks' call may take: the rest is the start of the group
# and the merge, so that the ranks' timeout names a hung rank before a supervisor's fires
_CALL_SHARE = 0.85


def close_groups() -> None:
    """Let every rank group of this process go (its ranks leave their process group, every
    group's at once)."""
    close_all(list(_GROUPS.values()))
    _GROUPS.clear()


def group_for(world_size: int, env: dict[str, str]) -> RankGroup:
    """The group of ``world_size`` ranks with ``env``, kept for the scenarios after it."""
    key = (world_size, tuple(sorted(env.items())))
    if _OWNER[0] != os.getpid():
        # forked from the process that started them (a worker from kvreg run --in-process's
        # pytest, say): those ranks are not this process's children, not its to use or end
        _GROUPS.clear()
        _OWNER[0] = os.getpid()
    if not _GROUPS:     # closed when this process ends (a worker too: multiprocessing's exit)
        util.Finalize(None, close_groups, exitpriority=10)
    if key not in _GROUPS:
        _GROUPS[key] = RankGroup(world_size, env=env)
    return _GROUPS[key]


@contextmanager
def _children_allowed() -> Iterator[None]:
    """A supervised worker is a daemonic process, which multiprocessing forbids to start
    children; its ranks are killed with it anyway (PR_SET_PDEATHSIG), so lift the flag
    while the group starts (``_config`` is where multiprocessing keeps it)."""
    config = multiprocessing.current_process()._config   # type: ignore[attr-defined]
    daemon = config.pop("daemon", None)
    try:
        yield
    finally:
        if daemon is not None:
            config["daemon"] = daemon


def _impl_spec(impl: Implementation) -> tuple[Any, str | None]:
    if impl.sources is None and impl.style != "reference":
        return impl, impl.pinning       # a test's own object: sent whole
    return impl.sources, impl.pinning


def run_ranked(sc: Scenario, impl: Implementation, *, keep_trace: bool = False,
               backend: Any = "fake", progress: Progress | None = None,
               timeout: float | None = None) -> ScenarioResult:
    """Run ``sc`` on ``sc.ranks`` rank processes and judge it; see the module doc."""
    start = time.monotonic()
    result = ScenarioResult(sc.id, sc.pool, "pass", guards=sc.guards)
    if backend != "fake":
        result.verdict = "skip"
        result.reason = "many-rank scenarios run on the fake host only (backend fake)"
        return result
    if progress is not None:
        progress.step(f"{sc.ranks} ranks")
    how = _impl_spec(impl)
    try:
        pickle.dumps(how)
    except Exception as exc:     # a test's own object whose functions have no import path
        result.verdict = "error"
        result.reason = (f"kvreg cannot run this scenario: the implementation cannot be sent "
                         f"to the rank processes ({exc}); load it by its spec "
                         "(file.py:function or package.module:function)")
        return result
    budget = timeout or DEFAULT_CALL_TIMEOUT_S
    config = process_config(sc)
    env = {k: v for k, v in config.env if v is not None}
    with tempfile.TemporaryDirectory(prefix="kvreg-host-") as folder:
        path = str(Path(folder) / "host")
        host = FakeHost.create(path, HostLimits(**sc.host))
        shared = f"kvreg-pool-{uuid.uuid4().hex[:12]}" if sc.shared else None
        group = group_for(sc.ranks, env)
        try:
            with _children_allowed():
                group.start()
                left = max(budget * _CALL_SHARE - (time.monotonic() - start), 0.5)
                outcomes = group.run(RANK_FUNCTION, [(sc, how, path, shared,
                                                      keep_trace)] * sc.ranks, timeout=left)
        except RankStartError as exc:
            result.verdict, result.reason = "error", f"kvreg could not start the ranks: {exc}"
            return result
        if shared is not None:     # kvreg made the region: kvreg unlinks it
            with suppress(OSError):
                host.rank(0).shm_unlink(shared)
        _merge(result, sc, outcomes, host)
    result.seconds = time.monotonic() - start
    return result


def _rank_entry(rank: int, verdict: str, violations: list[Violation],
                reason: str = "") -> dict[str, Any]:
    return {"rank": rank, "verdict": verdict,
            "violations": [v.as_dict() for v in violations],
            **({"reason": reason} if reason else {})}


def _died(outcome: RankOutcome, host: FakeHost, victims: list[int]) -> tuple[str, str]:
    """(verdict, reason) of a rank that did not return; ``victims``: the ranks the host's
    OOM killer took, in order."""
    oom = host.killed().get(outcome.rank)
    if oom:
        return "error", f"rank {outcome.rank} was OOM-killed by the host: {oom}"
    if outcome.kind == "stopped" and outcome.cause in victims:
        # the victims die together once the ranks' fills ended: whose death kvreg saw first
        # is their exits' race, so a rank stopped by one names the host's first victim
        return "error", f"stopped: rank {victims[0]} died"
    if outcome.kind == "raised" and outcome.exc_type not in ("SystemExit",
                                                             "KeyboardInterrupt"):
        # run_rank judges every exception of the code: this one is kvreg's
        return "internal-error", (f"kvreg internal error in rank {outcome.rank}: "
                                  f"{outcome.exc_type}: {outcome.message}")
    if outcome.kind == "raised":
        return "error", f"rank {outcome.rank}: the implementation raised {outcome.exc_type}"
    return "error", outcome.reason


def _merge(result: ScenarioResult, sc: Scenario, outcomes: list[RankOutcome],
           host: FakeHost) -> None:
    """Fill ``result`` from every rank's outcome and the cross-rank rules."""
    run = RanksRun(sc.ranks, {}, {}, dict(sc.host), sc.shared)
    judged: dict[int, ScenarioResult] = {}
    oom = [int(e["rank"]) for e in host.events() if e["kind"] == "oom-kill"]
    entries, reasons = [], []
    for outcome in outcomes:
        # a rank the host OOM-killed after it had returned (a peer's fill outlasted the
        # ranks' meeting after the fill) died all the same: named as the host's victim
        if outcome.ok and outcome.rank not in oom:
            rank_result, facts = outcome.value
            judged[outcome.rank] = rank_result
            if facts is not None:
                run.facts[outcome.rank] = facts
            continue
        verdict, reason = _died(outcome, host, oom)
        run.dead[outcome.rank] = reason
        entries.append(_rank_entry(outcome.rank, verdict, [], reason))
        # the host's first OOM victim first (its kill made the others'); a rank kvreg
        # stopped because another failed says least: named last
        order = oom.index(outcome.rank) if outcome.rank in oom else len(oom)
        reasons.append((verdict, reason, outcome.traceback,
                        (order, outcome.kind == "stopped")))
    _peer_failures(judged, run)
    for rank, rank_result in judged.items():
        entries.append(_rank_entry(rank, rank_result.verdict, rank_result.violations,
                                   rank_result.reason))
        result.violations += [_on(rank, v) for v in rank_result.violations]
        result.warnings += [_on(rank, v) for v in rank_result.warnings]
        result.calls += rank_result.calls
        if rank_result.reason and rank_result.verdict in ("error", "internal-error", "skip"):
            reasons.append((rank_result.verdict, f"rank {rank}: {rank_result.reason}",
                            rank_result.tb, (len(oom), False)))
        if rank_result.trace_text and not result.trace_text:
            result.trace_text = f"rank {rank}:\n{rank_result.trace_text}"
    # what a crashed earlier run left (host.stale_shm) and is still there is not this run's
    run.shm_left = {name: f for name, f in host.shm_files().items() if not f.get("stale")}
    result.violations += check_ranks(run)
    result.ranks = sorted(entries, key=lambda e: int(e["rank"]))
    verdicts = [e["verdict"] for e in entries] + (["fail"] if result.violations else [])
    result.verdict = max(verdicts, key=_SEVERITY.index)
    worst = sorted((r for r in reasons if r[0] == result.verdict), key=lambda r: r[3])
    if worst:
        result.reason, result.tb = worst[0][1], worst[0][2]
    if result.verdict in ("error", "internal-error", "skip"):
        # a run that did not complete is judged by no rule (the report's contract); what
        # the host was left with is still said
        left = [v for v in result.violations if v.rule == "shm-leaked"]
        result.reason += "".join(f"; shm-leaked: {v.message}" for v in left[:1])
        result.violations = []


def _on(rank: int, v: Violation) -> Violation:
    return Violation(v.rule, f"rank {rank}: {v.message}", v.seq, v.where, v.code, v.count)


def _peer_failures(judged: dict[int, ScenarioResult], run: RanksRun) -> None:
    """A rank that raised because its peers failed (an all-or-nothing registration that
    raises on every rank) made no failed call of its own and left nothing registered: its
    ``unexpected-error`` is the right answer where another rank's registration failed, or
    where the host cannot hold the ranks' pools together, so it is not held against it."""
    demand, capacity, _ = demand_and_capacity(run)
    peers_failed = {r for r, f in run.facts.items() if f["failed_calls"]}
    for rank, rank_result in judged.items():
        own = run.facts.get(rank)
        if own is None or own["failed_calls"] or own["registered"]:
            continue        # its own failure, or it kept its pool: the rule stands
        raised = any(v.rule == "unexpected-error" for v in rank_result.violations)
        if raised and run.dead:
            # a collective raised once a peer's process was gone (gloo answers a closed
            # connection before kvreg stops the rank): as stopped as a rank kvreg killed
            first = min(run.dead)
            rank_result.verdict = "error"
            rank_result.reason = f"stopped: rank {first} died ({run.dead[first]})"
            rank_result.violations = []
            continue
        if not (peers_failed - {rank}) and demand <= capacity:
            continue
        kept = [v for v in rank_result.violations if v.rule != "unexpected-error"]
        if len(kept) != len(rank_result.violations):
            rank_result.violations = kept
            if not kept and rank_result.verdict == "fail":
                rank_result.verdict = "pass"
