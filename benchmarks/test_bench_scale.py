"""Scale with seams, not pages (ARCHITECTURE.md#performance-targets).

1. Every bundled pool type and layout at 4 TiB: one-token pages against 64-token pages,
   register + copy-validate + teardown (target: at most 2x, peak RSS growth under 300 MB).
2. The Mooncake target's huge files at 4 TiB: one-token against 64-token pages, every scenario
   of the file through the runner (register, store round trip and PD writes over the pages that
   decide, teardown; same targets).
3. ``kvreg plan`` of a 10^12-page pool, every algorithm and the SVG (target: < 1 s, 100 MB).
Each run is a subprocess (its own peak RSS); figures are reported, never asserted.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from .conftest import MEDIANS

HERE = Path(__file__).resolve().parent
SCENARIOS = HERE.parent / "scenarios"


def _mooncake(path: Path) -> bool:
    return bool(tomllib.loads(path.read_text())["defaults"].get("target") == "mooncake")


MOONCAKE = [p for p in sorted(SCENARIOS.glob("*/huge*.toml")) if _mooncake(p)]


def _cases() -> list[tuple[Path, str]]:
    out = []
    for path in sorted(SCENARIOS.glob("*/huge*.toml")):
        if _mooncake(path):
            continue
        data = tomllib.loads(path.read_text())
        for sc in data["scenario"]:
            out.append((path, str(sc["params"]["layout"])))
    return out


def _run(*args: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, str(HERE / "pool_scale.py"), *args],
                         capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("path,layout", _cases(),
                         ids=[f"{p.parent.name}/{p.stem}/{lay}" for p, lay in _cases()])
def test_one_token_pages_cost_what_64_token_pages_cost(benchmark: Any, path: Path,
                                                       layout: str) -> None:
    def run() -> tuple[dict[str, Any], dict[str, Any]]:
        return _run(str(path), layout, "1"), _run(str(path), layout, "64")

    small, large = benchmark.pedantic(run, rounds=1, iterations=1)
    key = f"scale:{path.parent.name}/{path.stem}/{layout}"
    MEDIANS[key] = small["total_s"] / large["total_s"]
    MEDIANS[key + ":rss"] = max(small["peak_rss_growth_mb"], large["peak_rss_growth_mb"])
    MEDIANS[key + ":pages"] = small["pages"]
    MEDIANS[key + ":copied"] = small["pages_copied"]
    MEDIANS[key + ":s"] = small["total_s"]
    assert small["pages"] >= large["pages"]   # the one-token pool really has more pages


@pytest.mark.parametrize("path", MOONCAKE, ids=[f"{p.parent.name}/{p.stem}" for p in MOONCAKE])
def test_mooncake_one_token_pages_cost_what_64_token_pages_cost(benchmark: Any,
                                                                path: Path) -> None:
    def run() -> tuple[dict[str, Any], dict[str, Any]]:
        return _run("--mooncake", str(path), "1"), _run("--mooncake", str(path), "64")

    small, large = benchmark.pedantic(run, rounds=1, iterations=1)
    key = f"scale:{path.parent.name}/{path.stem}"
    MEDIANS[key] = small["total_s"] / large["total_s"]
    MEDIANS[key + ":rss"] = max(small["peak_rss_growth_mb"], large["peak_rss_growth_mb"])
    MEDIANS[key + ":pages"] = small["pages"]
    MEDIANS[key + ":copied"] = small["pages_copied"]
    MEDIANS[key + ":s"] = small["total_s"]
    assert small["pages"] >= large["pages"]   # the one-token pool really has more pages


def test_plan_of_a_trillion_pages(benchmark: Any) -> None:
    figures = benchmark.pedantic(lambda: _run("--plan", str(10**12)), rounds=3, iterations=1)
    MEDIANS["plan_1e12_s"] = figures["plan_s"]
    MEDIANS["plan_1e12_rss_mb"] = figures["peak_rss_growth_mb"]
    assert figures["pages"] == 10**12
