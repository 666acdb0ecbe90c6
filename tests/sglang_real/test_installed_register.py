"""The wheel's own ``_cuda_host_register`` / ``_cuda_host_unregister`` through kvreg's whole
catalog, against the committed baseline of its known failures: the tier stays green while
they stand, and a fix (a listed failure that passes) or a new failure shows."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
IMPL = HERE / "real_register.py"
BASELINE = HERE / "kvreg-baseline.txt"


def test_catalog_matches_the_baseline() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "kvreg.harness.cli", "run", "bundled", "--impl", f"{IMPL}:register",
         "--teardown", f"{IMPL}:teardown", "--baseline", str(BASELINE), "-j", "2"],
        capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "no longer fail" not in out.stdout, out.stdout[-4000:]


def test_the_baseline_records_the_error_path_bug() -> None:
    """0.5.23 formats a failed call with ``cudart.cudaGetErrorString(rc)`` on an ``int``;
    torch's binding takes only its cudaError enum (docs/cuda-runtime.md §7), so the error path
    raises TypeError instead of its RuntimeError."""
    from kvreg.harness.run.baseline import load_baseline

    baseline = load_baseline(BASELINE)
    assert baseline.rules("mha/page_first/fail-first-chunk") == {"error-reported"}
    # the TypeError also escapes the rollback loop: later chunks stay registered
    assert "not-rolled-back" in baseline.rules("mha/page_first/fail-during-rollback")


@pytest.mark.parametrize("sid", ["mha/page_unified/above-limit", "mla/page_unified/huge-4tib",
                                 "mha/page_first/above-limit"])
def test_the_success_paths_pass(sid: str) -> None:
    from kvreg.harness.run.baseline import load_baseline

    assert load_baseline(BASELINE).rules(sid) == set()
