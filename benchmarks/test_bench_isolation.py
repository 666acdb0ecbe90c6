"""Isolation's cost (ARCHITECTURE.md#performance-targets: the catalog at ``-j 1`` within
1.3x of running in-process, ``-j 2`` at most 0.85x of ``-j 1`` on 2 cores, under 5 s at ``-j
1``): the bundled catalog in-process, supervised with one job and with two, each in a fresh
interpreter, against kvreg's reference and against a user's implementation (the faithful
SGLang algorithm of tests/cuda_target/impls, which reads its chunk limit from the environment on
every call).

Against the reference, ``kvreg run`` itself is timed too, start to exit (``command``: jobs 0
is ``--in-process``), as the README's times are measured. The modes alternate within each
round, so a load change on a shared machine hits every side
of a ratio alike; ratios are taken between the best of three rounds and between the
medians, in wall and CPU time, with the load average printed beside them. Every mode must
give every scenario the same verdict. Figures are printed in the terminal summary, never
asserted.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .conftest import MEDIANS

HERE = Path(__file__).resolve().parent
MODES = [("in-process", 1), ("isolated", 1), ("isolated", 2)]
COMMANDS = [("command", 0), ("command", 1), ("command", 2)]
SGLANG = str(HERE.parent / "tests" / "cuda_target" / "impls" / "sglang_upstream.py") + ":register"
IMPLS = {"reference": [], "sglang_upstream": ["--impl", SGLANG, "--style", "sglang"]}


def _workload_unit() -> float:
    """CPU seconds of tools/suite_cost.py's fixed workload (best of three) on this machine
    now: a shared machine's speed changes from hour to hour (the same code took 4.8 s and
    6.8 s, 40 minutes apart; the unit was 0.29-0.53 s within one hour), so the catalog's
    seconds are printed beside it."""
    spec = importlib.util.spec_from_file_location("suite_cost", HERE.parent / "tools" /
                                                  "suite_cost.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return float(module.workload())


def _run(mode: str, jobs: int, impl: list[str]) -> dict[str, Any]:
    out = subprocess.run([sys.executable, str(HERE / "catalog_modes.py"), mode,
                          "--jobs", str(jobs), *impl], capture_output=True, text=True,
                         check=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("impl", list(IMPLS))
def test_catalog_isolated_vs_in_process(benchmark: Any, impl: str) -> None:
    modes = MODES + (COMMANDS if impl == "reference" else [])
    samples: dict[tuple[str, int], list[dict[str, Any]]] = {m: [] for m in modes}

    def one_round() -> None:
        for mode, jobs in modes:
            samples[(mode, jobs)].append(_run(mode, jobs, IMPLS[impl]))

    load = os.getloadavg()[0]
    unit = _workload_unit()
    benchmark.pedantic(one_round, rounds=3, iterations=1)
    MEDIANS[f"catalog:{impl}:load"] = max(load, os.getloadavg()[0])
    MEDIANS[f"catalog:{impl}:unit"] = min(unit, _workload_unit())
    verdicts = {tuple(r["verdicts"]) for runs in samples.values() for r in runs}
    assert len(verdicts) == 1, "a mode changed a verdict"
    for (mode, jobs), runs in samples.items():
        if impl == "reference":
            assert all(r["passed"] == r["total"] for r in runs)
        for key in ("wall_s", "cpu_s", "process_cpu_s"):
            values = sorted(r[key] for r in runs)
            MEDIANS[f"catalog:{impl}:{mode}:j{jobs}:{key}:median"] = values[len(values) // 2]
            MEDIANS[f"catalog:{impl}:{mode}:j{jobs}:{key}:best"] = values[0]
        MEDIANS[f"catalog:{impl}:{mode}:j{jobs}:workers"] = runs[0]["workers"]
