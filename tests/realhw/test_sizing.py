"""Scenario sizing for real hardware: run what fits, skip the rest with both sizes."""

from __future__ import annotations

import dataclasses

from kvreg.fakes.cuda.fake_cuda import FakeCuda
from kvreg.harness.scenario import load_paths
from kvreg.realhw.capabilities import detect
from kvreg.realhw.sizing import plan_catalog, plan_for_real

GiB = 1 << 30
SCENARIOS = load_paths()
GPU = detect(FakeCuda().runtime, rdma=False, torch=False)


def _first(pred: object) -> object:
    return next(s for s in SCENARIOS if pred(s))  # type: ignore[operator]


def test_without_a_gpu_every_scenario_is_skipped_with_the_reason() -> None:
    caps = detect(FakeCuda("no-driver").runtime, rdma=False, torch=False)
    runnable = [s for s in SCENARIOS if "cuda" in s.backends and s.target == "cuda"][:5]
    plans = plan_catalog(runnable, caps)
    assert {p.action for p in plans} == {"skip"}
    assert all("35 cudaErrorInsufficientDriver" in p.reason for p in plans)


def test_a_pool_that_fits_runs_and_one_that_does_not_is_skipped_with_sizes() -> None:
    sc = _first(lambda s: s.target == "cuda" and s.profile == "h200-r580" and not s.empty
                and "cuda" in s.backends)
    need = sum(b.nbytes for b in sc.geometry().buffers())
    roomy = dataclasses.replace(GPU, host_memory_available=need + 9 * GiB)
    plan = plan_for_real(sc, roomy)
    assert plan.action == "run" and plan.bytes_needed == need
    tight = dataclasses.replace(GPU, host_memory_available=need + 7 * GiB)
    plan = plan_for_real(sc, tight)
    assert plan.action == "skip" and plan.reason.startswith(f"needs {need / GiB:.1f} GiB")


def test_fake_only_mooncake_and_foreign_profiles_are_skipped() -> None:
    roomy = dataclasses.replace(GPU, host_memory_available=1 << 50)
    moon = _first(lambda s: s.target == "mooncake")
    assert plan_for_real(moon, roomy).reason == "target 'mooncake' runs on the fake store only"
    other = _first(lambda s: s.target == "cuda" and s.profile != "h200-r580")
    assert "whose facts differ from this machine" in plan_for_real(other, roomy).reason
    sc = dataclasses.replace(_first(lambda s: s.target == "cuda"), backends=("fake",))
    assert plan_for_real(sc, roomy).reason.startswith("fake-only scenario")
