"""The cost of rank processes (harness/ranks): one 8-rank call on a warm group against 8
calls on a warm single-rank group, and the start-up of a group of 8 against 8 fresh
interpreters importing torch (what 8 rank processes started without fork would pay).

CPU time is the caller's plus every rank's (read from /proc in nanoseconds), so a loaded
machine moves it less than wall time; both are printed. Ratios are printed, never asserted
(benchmarks/conftest.py's MEDIANS keeps them for the run's summary)."""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]
import pytest

from kvreg.harness.ranks import RankGroup

from .conftest import MEDIANS

pytest.importorskip("torch.distributed")
ROOT = str(Path(__file__).resolve().parents[1])
WORK = "benchmarks.rank_work:work"
ROUNDS = 200      # about a small scenario's worth of work per rank (some 10 ms)
REPEATS = 5


def _process_cpu(pid: int) -> float:
    """CPU seconds process ``pid`` used so far: its scheduler's runtime in nanoseconds
    (``/proc/PID/schedstat``), else psutil's, which counts in clock ticks (10 ms: too coarse
    for a call of some 10 ms per rank)."""
    try:
        with open(f"/proc/{pid}/schedstat") as stat:
            return int(stat.read().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        times = psutil.Process(pid).cpu_times()
        return float(times.user + times.system)


def _cpu(pids: list[int]) -> float:
    """CPU seconds used so far by this process and ``pids``."""
    return sum(_process_cpu(pid) for pid in (os.getpid(), *pids))


def _measure(group: RankGroup, step: Callable[[], Any]) -> tuple[float, float]:
    """Median (wall s, CPU s) of ``step`` over REPEATS, on ``group``'s started ranks."""
    walls, cpus = [], []
    for _ in range(REPEATS):
        cpu0, wall0 = _cpu(group.pids), time.perf_counter()
        step()
        walls.append(time.perf_counter() - wall0)
        cpus.append(_cpu(group.pids) - cpu0)
    return statistics.median(walls), statistics.median(cpus)


def _call(group: RankGroup) -> None:
    outcomes = group.run(WORK, [(ROUNDS,)] * group.world_size, timeout=300)
    assert all(o.ok for o in outcomes), [o.reason for o in outcomes]


def _calls(group: RankGroup, count: int) -> None:
    for _ in range(count):
        _call(group)


def _torch_import_cpu() -> float:
    """CPU seconds a fresh interpreter spends importing torch.distributed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", "import torch.distributed"], check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _start_cost(world: int) -> tuple[float, float, RankGroup]:
    """(wall s, CPU s) of starting a group of ``world``, and the started group."""
    group = RankGroup(world)
    cpu0, wall0 = _cpu([]), time.perf_counter()
    group.start()
    wall = time.perf_counter() - wall0
    return wall, _cpu(group.pids) - cpu0, group


def test_eight_ranks_cost_about_eight_single_rank_calls(capsys: Any) -> None:
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    start_wall, start_cpu, eight = _start_cost(8)
    # the same one intra-op thread per process as the ranks (harness/ranks/environment.py)
    with eight, RankGroup(1, env={"OMP_NUM_THREADS": "1"}) as one:
        _call(eight)
        _call(one)                         # warm both: the first call imports the work
        wall8, cpu8 = _measure(eight, lambda: _call(eight))
        wall1, cpu1 = _measure(one, lambda: _calls(one, 8))
        assert eight.starts == one.starts == 1
    torch_cpu = statistics.median(_torch_import_cpu() for _ in range(3))
    MEDIANS.update({"ranks:8-call:cpu": cpu8, "ranks:8x1-calls:cpu": cpu1,
                    "ranks:start8:cpu": start_cpu, "ranks:torch-import:cpu": torch_cpu})
    lines = [
        f"ranks: one 8-rank call {wall8 * 1e3:.1f} ms wall / {cpu8 * 1e3:.1f} ms CPU; "
        f"8 single-rank calls {wall1 * 1e3:.1f} ms / {cpu1 * 1e3:.1f} ms; "
        f"CPU ratio {cpu8 / cpu1:.2f}x (target about 1x), wall {wall8 / wall1:.2f}x",
        f"ranks: start-up of 8 ranks {start_wall * 1e3:.0f} ms wall / {start_cpu * 1e3:.0f} ms "
        f"CPU = {start_cpu / cpu8:.1f} warm 8-rank calls; 8 fresh torch imports would cost "
        f"{8 * torch_cpu * 1e3:.0f} ms CPU ({8 * torch_cpu / start_cpu:.1f}x the start-up); "
        f"load average {os.getloadavg()[0]:.1f}"]
    with capsys.disabled():
        print("\n" + "\n".join(lines))


def _tree_cpu() -> float:
    """CPU seconds used so far by this process and every process under it (the ranks)."""
    me = psutil.Process()
    return _cpu([p.pid for p in me.children(recursive=True)])


def test_an_eight_rank_scenario_costs_about_eight_single_rank_scenarios(capsys: Any) -> None:
    """The catalog's TP8 scenario (eight 200 GiB pools on one host: register, copies,
    teardown in every rank, the cross-rank rules) run as one 8-rank scenario on a warm group,
    against the same scenario with one rank run eight times in this process (the single
    process's runner), both through ``run_scenario`` with kvreg's reference."""
    from dataclasses import replace

    from kvreg.harness.ranks.scenario import close_groups
    from kvreg.harness.run.core import run_scenario
    from kvreg.harness.run.implementation import make_implementation
    from kvreg.harness.scenario import load_file

    path = Path(ROOT) / "scenarios" / "ranks" / "per_rank_pools.toml"
    eight = next(s for s in load_file(path) if s.name == "tp8-pools")
    one = replace(eight, ranks=1, host={}, shared=False)
    impl = make_implementation()

    def run8() -> None:
        assert run_scenario(eight, impl).verdict == "pass"

    def run1x8() -> None:
        for _ in range(8):
            assert run_scenario(one, impl).verdict == "pass"

    try:
        run8()
        run1x8()                                  # warm both
        walls8, cpus8, walls1, cpus1 = [], [], [], []
        for _ in range(REPEATS):
            for step, walls, cpus in ((run8, walls8, cpus8), (run1x8, walls1, cpus1)):
                cpu0, wall0 = _tree_cpu(), time.perf_counter()
                step()
                walls.append(time.perf_counter() - wall0)
                cpus.append(_tree_cpu() - cpu0)
    finally:
        close_groups()
    wall8, cpu8 = statistics.median(walls8), statistics.median(cpus8)
    wall1, cpu1 = statistics.median(walls1), statistics.median(cpus1)
    MEDIANS.update({"ranks:tp8-scenario:cpu": cpu8, "ranks:8x1-scenarios:cpu": cpu1})
    line = (f"ranks: the TP8 scenario {wall8 * 1e3:.0f} ms wall / {cpu8 * 1e3:.0f} ms CPU; 8 "
            f"single-rank scenarios {wall1 * 1e3:.0f} ms / {cpu1 * 1e3:.0f} ms; CPU ratio "
            f"{cpu8 / cpu1:.2f}x (target about 1x), wall {wall8 / wall1:.2f}x; load average "
            f"{os.getloadavg()[0]:.1f}")
    with capsys.disabled():
        print("\n" + line)
