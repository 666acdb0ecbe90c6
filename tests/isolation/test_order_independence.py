"""A verdict does not depend on the scenarios that ran before it (scenarios/FORMAT.md).

Correct implementations that keep what they reach CUDA, the store or the NICs through, and
read their configuration once (tests/isolation/impls/), run over shuffled samples of the
bundled catalog in one supervisor (one worker or two), and every verdict must equal the
verdict of that scenario run alone (a fresh supervisor whose worker runs only it). Before
fakes/doors.py, the cached-handle variants failed 360 of the catalog's 402 passing CUDA
scenarios in a whole-catalog run and passed each alone. A broken implementation that keeps
an earlier scenario's store object gets ``error`` naming where it keeps it, never ``fail``.
"""

from __future__ import annotations

from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvreg.harness.run.implementation import Implementation, make_implementation
from kvreg.harness.run.process import process_config
from kvreg.harness.run.result import ScenarioResult
from kvreg.harness.run.supervisor import Supervisor
from kvreg.harness.scenario import load_paths
from kvreg.harness.scenario.format import Scenario

from ..helpers.kvreg_cli import run_json
from ..helpers.paths import ISOLATION_IMPLS, isolation_spec

# (register, teardown, style): each keeps a handle or reads its configuration once
CACHING = {
    "sglang-global-cudart": ("caching.py:sglang_cached", "caching.py:sglang_cached_teardown",
                             "sglang"),
    "ctypes-global-cdll": ("caching.py:ctypes_cached", "caching.py:ctypes_cached_teardown",
                           "ctypes"),
    "driver-global-module": ("caching.py:driver_cached", "caching.py:driver_cached_teardown",
                             "driver"),
    "bindings-bound-at-import": ("bound_at_import.py:bindings_register",
                                 "bound_at_import.py:bindings_teardown", "ctypes"),
    "driver-bound-at-import": ("bound_at_import.py:driver_register",
                               "bound_at_import.py:driver_teardown", "driver"),
    "sglang-env-and-cudart-at-import": ("bound_at_import.py:sglang_register",
                                        "bound_at_import.py:sglang_teardown", "sglang"),
    "mooncake-class-pyverbs-env-cached": ("mooncake_caching.py:mooncake_cached",
                                          "mooncake_caching.py:mooncake_cached_teardown",
                                          "mooncake"),
}


@cache
def _catalog() -> tuple[Scenario, ...]:
    return tuple(load_paths())


@cache
def _impl(name: str) -> Implementation:
    register, teardown, style = CACHING[name]
    return make_implementation(str(ISOLATION_IMPLS / register), str(ISOLATION_IMPLS / teardown),
                               style)


def _applies(name: str, sc: Scenario) -> bool:
    return (sc.target == "mooncake") == (CACHING[name][2] == "mooncake")


@cache
def _alone(name: str, index: int) -> ScenarioResult:
    """The verdict of catalog scenario ``index`` run first in a fresh worker."""
    with Supervisor(_impl(name)) as sup:
        return sup.run_one(_catalog()[index])


def _show(r: ScenarioResult) -> str:
    return f"{r.verdict}: {r.reason or [v.message for v in r.violations][:2]}"


@pytest.mark.parametrize("name", sorted(CACHING))
@settings(max_examples=3)
@given(data=st.data())
def test_every_verdict_equals_the_scenario_run_alone(name: str, data: st.DataObject) -> None:
    indices = [i for i, sc in enumerate(_catalog()) if _applies(name, sc)]
    order = data.draw(st.lists(st.sampled_from(indices), min_size=3, max_size=8, unique=True),
                      label="scenarios, in the order they run")
    jobs = data.draw(st.sampled_from([1, 2]), label="jobs")
    scenarios = [_catalog()[i] for i in order]
    with Supervisor(_impl(name), jobs=jobs) as sup:
        together = dict(sup.run(scenarios))
    for pos, index in enumerate(order):
        alone = _alone(name, index)
        got = together[pos]
        assert (got.verdict, got.reason) == (alone.verdict, alone.reason), (
            f"{scenarios[pos].id}: {_show(got)} after others, {_show(alone)} alone")
        assert [v.rule for v in got.violations] == [v.rule for v in alone.violations]


@pytest.mark.parametrize(("cached", "fresh"), [
    ("caching.py:ctypes_cached", "caching.py:ctypes_fresh"),
    ("caching.py:sglang_cached", "caching.py:sglang_fresh"),
])
def test_kvreg_run_with_two_workers_gives_the_cached_variant_the_fresh_ones_verdicts(
        cached: str, fresh: str) -> None:
    style = "ctypes" if "ctypes" in cached else "sglang"

    def verdicts(spec: str) -> dict[str, str]:
        code, report, _, err = run_json("--impl", str(ISOLATION_IMPLS / spec),
                                        "--teardown", str(ISOLATION_IMPLS / f"{spec}_teardown"),
                                        "--style", style, "-j", "2", "bundled")
        assert code in (0, 1), err
        return {r["id"]: r["verdict"] for r in report["scenarios"]}

    fresh_verdicts = verdicts(fresh)
    assert sum(v == "pass" for v in fresh_verdicts.values()) >= 300   # a real catalog ran
    assert verdicts(cached) == fresh_verdicts


def test_registering_from_threads_with_a_shared_handle_gives_the_sequential_verdicts() -> None:
    """Chunks registered and released from a thread pool, the cudart module kept in a global
    they share: whatever order the threads ran in, every verdict is the sequential twin's."""
    def verdicts(register: str, teardown: str) -> dict[str, tuple[str, list[str]]]:
        code, report, _, err = run_json("--impl", str(ISOLATION_IMPLS / register),
                                        "--teardown", str(ISOLATION_IMPLS / teardown),
                                        "--style", "sglang", "-j", "2", "bundled")
        assert code in (0, 1), err
        return {r["id"]: (r["verdict"], [v["rule"] for v in r["violations"]])
                for r in report["scenarios"]}

    sequential = verdicts("caching.py:sglang_fresh", "caching.py:sglang_fresh_teardown")
    assert sum(v == "pass" for v, _ in sequential.values()) >= 300   # a real catalog ran
    assert verdicts("threaded.py:register", "threaded.py:teardown") == sequential


def test_keeping_an_earlier_scenarios_store_is_an_error_not_a_fail() -> None:
    impl = make_implementation(isolation_spec("keeps_first_store", "mooncake_caching"),
                               isolation_spec("keeps_first_store_teardown", "mooncake_caching"),
                               "mooncake")
    # three scenarios of one process configuration: one worker runs them in turn
    candidates = [sc for sc in _catalog() if sc.target == "mooncake" and not sc.options.get("pd")]
    config = process_config(candidates[0])
    chosen = [sc for sc in candidates if process_config(sc) == config][:3]
    assert len(chosen) == 3
    with Supervisor(impl) as sup:
        results = dict(sup.run(chosen))
    first, *later = (results[i] for i in range(len(chosen)))
    assert first.verdict != "error"          # its own store: judged as usual
    for r in later:
        assert r.verdict == "error" and not r.violations, _show(r)
        assert "a fake that is not this scenario's" in r.reason
        assert "MooncakeDistributedStore object of a retired Mooncake deployment " \
               "(.register_buffer)" in r.reason
        assert "mooncake_caching.py" in r.reason and "._STORE" in r.reason
