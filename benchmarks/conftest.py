"""Benchmarks record medians here so a run can report ratios between its own measurements."""

from __future__ import annotations

from typing import Any

import pytest

MEDIANS: dict[str, float] = {}


@pytest.fixture
def record_median(benchmark: Any) -> Any:
    def record(name: str) -> None:
        MEDIANS[name] = benchmark.stats.stats.median
    return record


def _moved(key: str) -> str:
    """The Mooncake target moves whole pages through the store, the CUDA one page extents."""
    return "pages moved" if key.startswith("scale:mooncake/") else "extents copied"


def _catalog_lines(impl: str) -> list[str]:
    """The catalog's isolation ratios (benchmarks/test_bench_isolation.py), best of three
    and median, wall and CPU."""
    key = f"catalog:{impl}:"
    if f"{key}load" not in MEDIANS:
        return []
    out = [f"bundled catalog against {impl} (load average up to {MEDIANS[key + 'load']:.1f}; "
           f"a tools/suite_cost.py workload unit took {MEDIANS.get(key + 'unit', 0):.2f} s; "
           f"workers started: -j 1 {MEDIANS[key + 'isolated:j1:workers']:.0f}, "
           f"-j 2 {MEDIANS[key + 'isolated:j2:workers']:.0f})"]
    for stat in ("best", "median"):
        def get(mode: str, jobs: int, what: str, stat: str = stat) -> float:
            return MEDIANS[f"{key}{mode}:j{jobs}:{what}:{stat}"]
        inp, j1, j2 = (get("in-process", 1, "wall_s"), get("isolated", 1, "wall_s"),
                       get("isolated", 2, "wall_s"))
        out.append(f"  {stat}: -j 1 {j1:.2f} s (target < 5 s), in-process {inp:.2f} s, "
                   f"-j 2 {j2:.2f} s; -j 1 / in-process = {j1 / inp:.2f}x (target <= 1.3x), "
                   f"-j 2 / -j 1 = {j2 / j1:.2f}x (target <= 0.85x); CPU -j 1 / in-process = "
                   f"{get('isolated', 1, 'cpu_s') / get('in-process', 1, 'cpu_s'):.2f}x; "
                   f"CPU of the whole -j 1 process (torch's import and the catalog's load "
                   f"included) {get('isolated', 1, 'process_cpu_s'):.2f} s")
        if f"{key}command:j1:wall_s:{stat}" in MEDIANS:
            inp, j1, j2 = (get("command", 0, "wall_s"), get("command", 1, "wall_s"),
                           get("command", 2, "wall_s"))
            out.append(f"  {stat}, `kvreg run` start to exit: -j 1 {j1:.2f} s (target < 5 s "
                       f"idle), --in-process {inp:.2f} s, -j 2 {j2:.2f} s; -j 1 / in-process "
                       f"= {j1 / inp:.2f}x, -j 2 / -j 1 = {j2 / j1:.2f}x")
    return out


def pytest_terminal_summary(terminalreporter: Any) -> None:
    pairs = [("register_unregister_full", "register_unregister_bare", "<= 3x"),
             ("register_unregister_full_tail", "register_unregister_bare", "<= 3x"),
             ("register_unregister_full", "register_unregister_magicmock", "report"),
             ("register_unregister_full_tail", "register_unregister_magicmock", "report"),
             ("register_unregister_state_floor", "register_unregister_bare", "report"),
             ("register_unregister_full", "register_unregister_state_floor", "report"),
             ("register_unregister_budgeted", "register_unregister_full", "report"),
             ("register_unregister_budgeted_idle", "register_unregister_full", "report")]
    lines = []
    for num, den, target in pairs:
        if num in MEDIANS and den in MEDIANS:
            lines.append(f"{num} / {den} = {MEDIANS[num] / MEDIANS[den]:.2f}x (target {target})")
    for name, value in MEDIANS.items():
        if name.startswith("descriptors_per_s"):
            lines.append(f"{name} = {value:,.0f} descriptors/s (target >= 5,000,000)")
    if "4tib_total_s" in MEDIANS:
        lines.append(f"4 TiB pool plan+register+copy-validate+teardown: "
                     f"{MEDIANS['4tib_total_s']:.2f} s (target < 2 s), peak RSS growth "
                     f"{MEDIANS['4tib_peak_rss_growth_mb']:.0f} MB (target < 200 MB)")
    if "catalog_s" in MEDIANS:
        lines.append(f"bundled catalog ({MEDIANS.get('catalog_scenarios', '?')} scenarios) "
                     f"with -j 2: {MEDIANS['catalog_s']:.1f} s (target < 60 s)")
    for key, ratio in MEDIANS.items():
        if key.startswith("scale:") and key.count(":") == 1:
            lines.append(f"4 TiB {key[6:]}: 1-token/64-token pages = {ratio:.2f}x (target <= 2x), "
                         f"{MEDIANS[key + ':s']:.2f} s, {MEDIANS[key + ':pages']:,.0f} pages, "
                         f"{MEDIANS[key + ':copied']:,.0f} {_moved(key)}, peak RSS growth "
                         f"{MEDIANS[key + ':rss']:.0f} MB (target < 300 MB)")
    if "plan_1e12_s" in MEDIANS:
        lines.append(f"kvreg plan of 1e12 pages (3 algorithms + SVG): "
                     f"{MEDIANS['plan_1e12_s']:.2f} s (target < 1 s), peak RSS growth "
                     f"{MEDIANS['plan_1e12_rss_mb']:.0f} MB (target < 100 MB)")
    for impl in ("reference", "sglang_upstream"):
        lines.extend(_catalog_lines(impl))
    if lines:
        terminalreporter.section("kvreg performance ratios")
        for line in lines:
            terminalreporter.write_line(line)
