"""A pool in thousands of MRs against the same pool in a few (ARCHITECTURE.md#performance-targets:
every check costs seams, not MRs x pages).

The Mooncake huge scenarios (4 TiB of one-token pages) run once with kvreg's reference, its MRs
as large as the scenario's 256 GiB limit allows (17 per node), and once capped at 1 GiB (4 097
per node), each in its own process (benchmarks/many_mrs.py). Reported, never asserted: the
ratio of the totals, and of kvreg's own steps (transfers, finish, checks) apart from the
implementation's calls (register, teardown: 240 times as many store calls, each through the
fake), with the seconds of each step.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .conftest import MEDIANS

HERE = Path(__file__).resolve().parent
HUGE = HERE.parent / "scenarios" / "mooncake" / "huge.toml"
OWN = ("transfers", "finish", "checks")


def _run(name: str, mr_gib: int) -> dict[str, Any]:
    out = subprocess.run([sys.executable, str(HERE / "many_mrs.py"), str(HUGE), name,
                          str(mr_gib)], capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("name", ["page-first-mr-seams", "pd-page-first"])
def test_thousands_of_mrs_cost_their_seams(benchmark: Any, name: str,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    def run() -> tuple[dict[str, Any], dict[str, Any]]:
        return _run(name, 1), _run(name, 0)

    many, few = benchmark.pedantic(run, rounds=1, iterations=1)
    assert many["verdict"] == few["verdict"] == "pass", (many["first"], few["first"])
    assert many["mrs"] > 100 * few["mrs"]       # the capped run really has thousands of MRs
    own_many = sum(many["seconds"].get(k, 0.0) for k in OWN)
    own_few = sum(few["seconds"].get(k, 0.0) for k in OWN)
    figures = {"mrs": (many["mrs"], few["mrs"]), "total_s": (many["total_s"], few["total_s"]),
               "total_ratio": many["total_s"] / few["total_s"],
               "kvreg_steps_ratio": own_many / own_few,
               "seconds": (many["seconds"], few["seconds"]),
               "pages_copied": (many["pages_copied"], few["pages_copied"]),
               "peak_rss_growth_mb": (many["peak_rss_growth_mb"], few["peak_rss_growth_mb"])}
    benchmark.extra_info.update(figures)
    MEDIANS[f"many_mrs:{name}"] = figures["total_ratio"]
    with capsys.disabled():
        print(f"\n4 TiB {name}: {many['mrs']} MRs / {few['mrs']} MRs = "
              f"{figures['total_ratio']:.2f}x total ({many['total_s']:.2f} s / "
              f"{few['total_s']:.2f} s); kvreg's own steps {own_many:.2f} s / {own_few:.2f} s = "
              f"{figures['kvreg_steps_ratio']:.2f}x (target <= 2x); pages moved "
              f"{many['pages_copied']} / {few['pages_copied']}")
