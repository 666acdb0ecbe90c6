"""Whole-pipeline targets (ARCHITECTURE.md#performance-targets): a 4 TiB pool end to end,
and the bundled catalog.

Both run in subprocesses (peak RSS and wall time of their own); figures are printed in the
terminal summary, never asserted.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .conftest import MEDIANS

HERE = Path(__file__).resolve().parent


def test_4tib_pool_pipeline(benchmark: Any) -> None:
    def run() -> dict[str, Any]:
        out = subprocess.run([sys.executable, str(HERE / "pool_4tib.py")], capture_output=True,
                             text=True, check=True)
        return dict(json.loads(out.stdout.strip().splitlines()[-1]))

    figures = benchmark.pedantic(run, rounds=3, iterations=1)
    MEDIANS["4tib_total_s"] = figures["total_s"]
    MEDIANS["4tib_peak_rss_growth_mb"] = figures["peak_rss_growth_mb"]
    assert figures["pages"] > 900_000   # the pipeline really covered a 4 TiB pool


def test_bundled_catalog(benchmark: Any) -> None:
    def run() -> float:
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "kvreg.harness.cli", "run", "-j", "2",
                              "--json", "-"], capture_output=True, text=True)
        elapsed = time.perf_counter() - t0
        doc = json.loads(out.stdout)
        assert doc["summary"]["failed"] == 0 and doc["summary"]["errors"] == 0
        MEDIANS["catalog_scenarios"] = doc["summary"]["total"]
        return elapsed

    MEDIANS["catalog_s"] = benchmark.pedantic(run, rounds=1, iterations=1)
