"""tools/run_files_alone.py: each file of the README's test command in a process of its own.

The tool's promise is "the README's command, minus -n, one file at a time": these tests hold
its command to the README's, its file list to what pytest collects, and its verdict to the
exit status of each file's run (a failing file fails the whole, and says how to repeat it).
Running the real suite this way is the tool's own job, not the suite's (a process per file).
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location(
    "run_files_alone", ROOT / "tools" / "run_files_alone.py")
assert SPEC is not None and SPEC.loader is not None
tool = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(tool)


def test_its_command_is_the_readmes_without_workers() -> None:
    readme = (ROOT / "README.md").read_text()
    command = re.search(r"^(python -m pytest [^#\n]*?)\s+# kvreg's own test suite", readme,
                        re.M)
    assert command is not None and command.group(1) == tool.README_COMMAND
    alone = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    assert alone == tool.ALONE
    for spelling in ("-n 2", "-n2", "-nauto", "--numprocesses 3", "--numprocesses=auto"):
        assert tool.without_workers(f"python -m pytest {spelling} -q -x") == \
            ["python", "-m", "pytest", "-q", "-x"]


def test_the_files_are_those_collected_in_order_each_once() -> None:
    collection = "\n".join([
        "tests/b/test_x.py::test_one", "tests/b/test_x.py::TestC::test_two[1-2]",
        "tests/infra/test_y.py::test_three", "scenarios/mha/paged.toml::mha/paged/whole",
        "tests/b/test_x.py::test_four", "", "4/5 tests collected (1 deselected) in 0.10s"])
    assert tool.files_of(collection) == ["tests/b/test_x.py", "tests/infra/test_y.py",
                                         "scenarios/mha/paged.toml"]


@pytest.mark.parametrize(("code", "output", "expected"), [
    (0, "....s\n4 passed, 1 skipped in 2.01s\n", ("PASS", "4 passed, 1 skipped", [])),
    (1, ".F\nFAILED tests/t.py::test_b - assert 1 == 2\n1 failed, 1 passed in 0.50s\n",
     ("FAIL", "1 failed, 1 passed", ["FAILED tests/t.py::test_b - assert 1 == 2"])),
    (2, "ERROR tests/t.py - ImportError: x\n!!! Interrupted: 1 error during collection !!!\n"
        "1 error in 0.31s\n",
     ("FAIL", "1 error", ["ERROR tests/t.py - ImportError: x"])),
    # no short summary (a crash): its last lines say what happened
    (-9, "..\nSegmentation fault\n", ("FAIL", "Segmentation fault", ["..",
                                                                      "Segmentation fault"])),
])
def test_a_files_verdict_is_its_exit_status(code: int, output: str,
                                            expected: tuple[str, str, list[str]]) -> None:
    assert tool.outcome(code, output) == expected


def test_one_failing_file_fails_the_run_and_names_how_to_repeat_it(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    files = ["tests/infra/test_x.py", "tests/infra/test_y.py", "tests/pools/test_z.py"]
    monkeypatch.setattr(tool, "collected_files", lambda paths: files)
    runs: list[tuple[str, list[str]]] = []

    def run_alone(name: str, extra: list[str], timeout: float) -> tuple[str, float, str,
                                                                         list[str]]:
        runs.append((name, extra))
        if name.endswith("test_y.py"):
            return "FAIL", 1.0, "1 failed", ["FAILED tests/infra/test_y.py::t - KeyError"]
        return "PASS", 1.0, "3 passed", []

    monkeypatch.setattr(tool, "run_alone", run_alone)
    assert tool.main(["tests/infra", "tests/pools/"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert [r[0] for r in runs] == files                  # the collected order
    assert all(r[1] == [] for r in runs)                  # not shuffled unless asked
    assert out[0].startswith("PASS") and out[0].endswith("tests/infra/test_x.py  (3 passed)")
    assert out[1].startswith("FAIL") and "tests/infra/test_y.py" in out[1]
    assert out[2].strip() == "FAILED tests/infra/test_y.py::t - KeyError"
    assert out[3].strip().endswith("-m pytest -q -p no:cacheprovider tests/infra/test_y.py")
    assert out[-1].startswith("3 files alone: 2 passed, 1 failed in ")
    assert out[-1].endswith("(tests/infra/test_y.py)")

    runs.clear()
    files.remove("tests/infra/test_y.py")
    assert tool.main(["--exclude", "tests/pools/", "--shuffle", "5"]) == 0
    assert runs == [("tests/infra/test_x.py", ["-p", "tools.pytest_shuffle", "--shuffle", "5"])]


@pytest.mark.parametrize("argv", [["no/such/folder"], ["--exclude", "no/such"],
                                  ["--timeout", "0"]])
def test_bad_input_is_one_line_and_exit_2(argv: list[str],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert tool.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("run_files_alone: ")
