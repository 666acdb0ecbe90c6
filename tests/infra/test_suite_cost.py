"""tools/suite_cost.py: the CI check that the README's test command's CPU does not grow back
past a ratio to a fixed workload measured in the same run (issue 25 §6: each speed wall has a
check that would catch its return). Ratios of one run only, no wall-clock limit."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("suite_cost", ROOT / "tools" / "suite_cost.py")
assert SPEC is not None and SPEC.loader is not None
suite_cost: Any = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(suite_cost)

PY = sys.executable
# a command that costs many workload units when the unit is tiny (rounds=200)
BURN = [PY, "-c", "sum(i * i for i in range(2_000_000))"]


def test_a_command_within_its_units_passes_and_prints_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "cost.txt"
    assert suite_cost.check([PY, "-c", "pass"], 1e9, rounds=2_000, report=str(report)) == 0
    assert capsys.readouterr().err == ""
    line = report.read_text()
    assert line.startswith("suite cost: ") and "limit 1e+09 units)" in line


def test_a_command_past_its_units_fails_naming_the_figures(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert suite_cost.check(BURN, 1, rounds=200) == 1
    err = capsys.readouterr().err
    assert err.startswith("suite cost: ") and "limit 1 units)" in err
    assert "the test command got slower" in err


def test_the_units_are_the_commands_cpu_over_the_workloads(tmp_path: Path) -> None:
    # the same command measured against two units: the figures scale with the unit
    small, large = tmp_path / "small.txt", tmp_path / "large.txt"
    assert suite_cost.check(BURN, 1e9, rounds=2_000, report=str(small)) == 0
    assert suite_cost.check(BURN, 1e9, rounds=200_000, report=str(large)) == 0

    def units(p: Path) -> float:
        return float(p.read_text().split(" = ")[1].split()[0])

    assert units(small) > 5 * units(large)


def test_the_unit_is_measured_before_and_after_the_command_and_averaged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a machine that slows during the run: the unit is the mean of both measurements
    seen = iter([0.1, 0.3])
    monkeypatch.setattr(suite_cost, "workload", lambda rounds: next(seen))
    report = tmp_path / "cost.txt"
    assert suite_cost.check([PY, "-c", "pass"], 1e9, report=str(report)) == 0
    line = report.read_text()
    assert "units of 0.200 s (0.100 s before, 0.300 s after;" in line, line


def test_the_commands_own_failure_is_its_exit_status() -> None:
    assert suite_cost.check([PY, "-c", "import sys; sys.exit(3)"], 1e9, rounds=2_000) == 3


@pytest.mark.parametrize("argv", [["--max-units", "10"], ["--max-units", "0", "--", PY],
                                  ["--", PY]])
def test_bad_input_is_one_line_and_exit_2(argv: list[str]) -> None:
    proc = subprocess.run([PY, "tools/suite_cost.py", *argv], capture_output=True, text=True,
                          cwd=ROOT)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("suite_cost.py: error: ")


def test_ci_runs_the_readme_command_under_the_check() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    last = [line for line in ci.splitlines() if line.strip() and not line.startswith("#")][-1]
    assert last.startswith("python tools/suite_cost.py --max-units ")
    assert last.endswith("-- python -m pytest -n 2 -q -p tools.pytest_shuffle --shuffle commit")
