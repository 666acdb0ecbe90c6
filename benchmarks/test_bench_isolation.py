"""Isolation's cost (design.md: at most 1.3x running in-process): the bundled catalog with
and without supervised workers, serially and with two jobs, each in a fresh interpreter.

The modes alternate within each round, so a load change on a shared runner hits both sides
of a ratio alike; figures (wall and CPU seconds, ratios) are printed in the terminal
summary, never asserted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from .conftest import MEDIANS

HERE = Path(__file__).resolve().parent
MODES = [("in-process", 1), ("isolated", 1), ("in-process", 2), ("isolated", 2)]


def _run(mode: str, jobs: int) -> dict[str, Any]:
    out = subprocess.run([sys.executable, str(HERE / "catalog_modes.py"), mode,
                          "--jobs", str(jobs)], capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def test_catalog_isolated_vs_in_process(benchmark: Any) -> None:
    samples: dict[tuple[str, int], list[dict[str, Any]]] = {m: [] for m in MODES}

    def one_round() -> None:
        for mode, jobs in MODES:
            samples[(mode, jobs)].append(_run(mode, jobs))

    benchmark.pedantic(one_round, rounds=2, iterations=1)
    for (mode, jobs), runs in samples.items():
        assert all(r["passed"] == r["total"] for r in runs)
        for key in ("wall_s", "cpu_s"):
            values = sorted(r[key] for r in runs)
            MEDIANS[f"catalog_{mode}_j{jobs}_{key}"] = values[len(values) // 2]
