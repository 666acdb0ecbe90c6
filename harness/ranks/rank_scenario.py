"""The rank side of a many-rank scenario: what every rank process runs for it.

Each rank loads the implementation by the spec kvreg was given (once per rank process and
spec), opens the scenario's host by its path, keeps the scenario's fault rules that are its
own (a rule with ``rank = K`` is rank K's; one without is every rank's), builds its rank's
world through the target (``build_rank``) and runs the single process's flow on it
(harness/run/core.py ``judge_run``): register, transfers, teardown, the same checks. It
returns its result and what the cross-rank rules read of it (checks.py), both plain data.
A rank the host OOM-killed ends as a killed process does: by SIGKILL.
"""

from __future__ import annotations

import os
import signal
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from kvreg.fakes.host.fake_host import FakeHost
from kvreg.fakes.host.limits import HostLimits
from kvreg.harness.run.core import judge_run
from kvreg.harness.run.implementation import Implementation, make_implementation
from kvreg.harness.run.result import ScenarioResult
from kvreg.harness.run.target import RankPlace
from kvreg.harness.run.targets import get_target

if TYPE_CHECKING:
    from kvreg.harness.scenario.format import Scenario

__all__ = ["MEET_S", "ImplSpec", "implementation", "rank_faults", "run_rank"]

# how a rank gets the implementation: (impl, teardown, style, base) and the run's pinning,
# or the object itself where it was not loaded from a spec (a test's own)
ImplSpec = tuple[Any, str | None]
_LOADED: dict[Any, Implementation] = {}

# how long a rank waits for its peers where they meet: before its register, after it and
# after the fill (a peer that failed to build never comes; the wait is bounded, never a hang)
MEET_S = 5.0


def implementation(how: ImplSpec) -> Implementation:
    """The implementation ``how`` names, loaded once in this rank process."""
    source, pinning = how
    if isinstance(source, Implementation):
        return source
    key = (source, pinning)
    if key not in _LOADED:
        if source is None:
            impl = make_implementation()
        else:
            spec, teardown, style, base = source
            impl = make_implementation(spec, teardown, style, base=base)
        impl.pinning = pinning
        _LOADED[key] = impl
    return _LOADED[key]


def rank_faults(faults: tuple[Any, ...], rank: int) -> tuple[dict[str, Any], ...]:
    """The fault rules rank ``rank`` arms, without their ``rank`` key."""
    return tuple({k: v for k, v in f.items() if k != "rank"} for f in faults
                 if f.get("rank", rank) == rank)


def run_rank(sc: Scenario, how: ImplSpec, host_path: str, shared: str | None,
             keep_trace: bool) -> tuple[ScenarioResult, dict[str, Any] | None]:
    """This rank's judged run of ``sc`` and its facts (None where no world was built)."""
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    impl = implementation(how)
    host = FakeHost(host_path, HostLimits(**sc.host))
    place = RankPlace(rank, world_size, host.rank(rank, pid=os.getpid()), host_path, shared)
    mine = replace(sc, faults=rank_faults(sc.faults, rank))
    target: Any = get_target(sc.target)
    built: list[Any] = []

    def build() -> Any:
        built.append(target.build_rank(mine, impl, "fake", place))
        # every rank's register starts together (FakeHost.rendezvous): a verdict on pins
        # that race must not depend on how the ranks were scheduled while they built
        host.rendezvous("register", world_size, MEET_S, rank=rank)
        return built[0]

    result = judge_run(mine, impl, build, keep_trace=keep_trace)
    facts = built[0].facts() if built else None
    if rank in host.killed():       # the host's OOM killer chose this rank: SIGKILL
        os.kill(os.getpid(), signal.SIGKILL)
    return result, facts
