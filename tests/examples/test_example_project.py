"""The example downstream project (examples/sglang_style_pool) catches its planted bug."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sglang_style_pool"


def _pytest(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:randomly", *args],
                          cwd=EXAMPLE, capture_output=True, text=True, timeout=300)


def test_planted_bug_is_caught_with_page_and_seam() -> None:
    out = _pytest()
    assert out.returncode == 1, out.stdout[-2000:]
    text = out.stdout
    assert "FAILED kv_scenarios/our_pool.toml::kv_scenarios/our_pool/production-size" in text
    assert ("[transfer-failed] page 238 of kv_buffer [1070383104, 1074880512) spans "
            "registrations at offset 1073741824") in text
    # the project's own unit tests, its lifecycle machine and the rollback scenario pass
    assert "4 passed" in text and "1 failed" in text


def test_the_fixed_implementation_passes() -> None:
    out = _pytest("--kvreg-impl", "mypool_fixed.py:register")
    assert out.returncode == 0, out.stdout[-2000:]
    assert "5 passed" in out.stdout


def test_the_fixed_implementation_passes_the_whole_bundled_catalog() -> None:
    """The guide's claim: slab seams where the pool passes no G fix every CUDA scenario."""
    out = subprocess.run([sys.executable, "-m", "kvreg.harness.cli", "run", "bundled",
                          "kv_scenarios", "--impl", "mypool_fixed.py:register", "-j", "2"],
                         cwd=EXAMPLE, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    last = out.stdout.strip().splitlines()[-1]
    assert " 0 failed" in last and "errors" not in last, last


def test_the_committed_baseline_records_the_planted_bug() -> None:
    from kvreg.harness.run.baseline import load_baseline

    baseline = load_baseline(EXAMPLE / "kvreg-baseline.txt")
    # the byte-offset seam cuts a page (seams-aligned, judged from the trace) and a copy of
    # that page fails (transfer-failed)
    assert baseline.rules("kv_scenarios/our_pool/production-size") == {"transfer-failed",
                                                                    "seams-aligned"}
    out = subprocess.run([sys.executable, "-m", "kvreg.harness.cli", "run", "kv_scenarios",
                          "--impl", "mypool.py:register", "--baseline", "kvreg-baseline.txt"],
                         cwd=EXAMPLE, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-2000:]
    assert "1 scenario(s) fail as recorded, 0 new failure(s), 0 recorded failure(s) gone" \
        in out.stdout
