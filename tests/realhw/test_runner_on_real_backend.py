"""The scenario runner on the real-hardware path, with the real modules stood in for.

On this machine the real path must skip with the missing-hardware reason (cuda-bindings
returns 35 without a driver); with RealCuda driving a fake's modules, the same scenario runs
through real-memory buffers, the recorder, and the final clean-up.
"""

from __future__ import annotations

import pytest

from kvreg.fakes import FakeCuda
from kvreg.harness.run.core import run_scenario
from kvreg.harness.run.implementation import make_implementation
from kvreg.harness.scenario import bundled_root, load_file
from kvreg.realhw.backend import RealCuda


def _scenario(name: str) -> object:
    scs = load_file(bundled_root() / "mla" / "page_first_direct.toml", bundled_root())
    return next(s for s in scs if s.name == name)


def test_cuda_backend_without_a_driver_skips_with_the_reason() -> None:
    pytest.importorskip("cuda.bindings.runtime", reason="cuda-bindings is not installed")
    from cuda.bindings import runtime

    if int(runtime.cudaGetDeviceCount()[0]) == 0:
        pytest.skip("a GPU is present: the skip path cannot be shown here")
    result = run_scenario(_scenario("below-limit"), make_implementation(), backend="cuda")
    assert result.verdict == "skip"
    assert "35" in result.reason or "driver" in result.reason


def test_real_path_runs_a_scenario_on_stand_in_modules(monkeypatch: pytest.MonkeyPatch) -> None:
    stand_in = FakeCuda()   # plays the real driver: its faces stand in for the real modules
    real = RealCuda(runtime_module=stand_in.runtime, torch_module=stand_in.torch,
                    profile=stand_in.profile)
    from kvreg.realhw import capabilities

    caps = capabilities.detect(stand_in.runtime, rdma=False, torch=False)
    monkeypatch.setattr(capabilities, "detect", lambda *a, **k: caps)
    sc = _scenario("below-limit")
    result = run_scenario(sc, make_implementation(), backend=real)
    assert result.verdict == "pass", result.violations
    assert result.calls > 0
    assert stand_in.live_registrations() == []     # the real driver is left clean
