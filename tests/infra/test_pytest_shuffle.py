"""tools/pytest_shuffle.py: a seed names one order of files and of tests within each file, a
real run (with xdist too) follows it and prints the seed, and CI's main step uses it.

Without these, a CI step that passes ``--shuffle`` could run the usual order every time (a
plugin that reads the seed but never reorders) and stay green on an order-dependent suite.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location(
    "pytest_shuffle", ROOT / "tools" / "pytest_shuffle.py")
assert SPEC is not None and SPEC.loader is not None
shuffle = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(shuffle)

IDS = [f"tests/{f}.py::t{i}" for f in "abcd" for i in range(6)]


def order(seed: int | None) -> list[str]:
    config: Any = SimpleNamespace(stash={shuffle.SEED: seed})
    items: Any = [SimpleNamespace(nodeid=i) for i in IDS]
    shuffle.pytest_collection_modifyitems(config, items)
    return [i.nodeid for i in items]


def test_without_a_seed_the_order_is_kept() -> None:
    assert order(None) == IDS


def test_a_seed_names_one_order_that_keeps_each_files_tests_together() -> None:
    first = order(3)
    assert first == order(3) and first != IDS and sorted(first) == sorted(IDS)
    files = [i.split("::")[0] for i in first]
    runs = [f for n, f in enumerate(files) if n == 0 or files[n - 1] != f]
    assert len(runs) == 4                       # each file's tests run together
    assert any(order(s) != first for s in range(4, 8))


@pytest.fixture
def suite(pytester: pytest.Pytester) -> pytest.Pytester:
    """Four files of five tests each."""
    for name in "abcd":
        pytester.makepyfile(**{f"test_{name}": "\n".join(
            f"def test_{name}{i}():\n    pass\n" for i in range(5))})
    return pytester


def run(suite: pytest.Pytester, *args: str) -> pytest.RunResult:
    """A pytest run in this process with the plugin loaded, as ``-p tools.pytest_shuffle``."""
    return suite.runpytest_inprocess("-p", "no:cacheprovider", *args, plugins=[shuffle])


def ran(result: pytest.RunResult) -> list[str]:
    return re.findall(r"^(test_\w\.py::test_\w+) PASSED", result.stdout.str(), re.M)


def test_a_shuffled_run_moves_files_and_tests_and_prints_its_seed(suite: pytest.Pytester) \
        -> None:
    usual = ran(run(suite, "-v"))
    assert len(usual) == 20 and usual == sorted(usual)
    runs = {}
    for seed in (7, 8):
        result = run(suite, "-v", "--shuffle", str(seed))
        result.assert_outcomes(passed=20)
        runs[seed] = ran(result)
        assert sorted(runs[seed]) == usual
        assert f"shuffled order: --shuffle {seed}" in result.stdout.lines[:6]    # the header
    assert usual not in runs.values() and runs[7] != runs[8]
    files = {s: list(dict.fromkeys(i.split("::")[0] for i in r)) for s, r in runs.items()}
    assert any(f != sorted(f) for f in files.values())               # files moved
    assert any(r[:5] != sorted(r[:5]) for r in runs.values())        # tests within a file
    assert ran(run(suite, "-v", "--shuffle", "7")) == runs[7]      # the same seed, same order


def test_quiet_the_seed_is_printed_before_the_summary_line(suite: pytest.Pytester) -> None:
    # .ci/run's main step is quiet, and -q hides the header; the summary stays the last line.
    # (Its two xdist workers collect in the same order, or xdist stops that run: loud, so not
    # repeated here at the cost of three more processes.)
    result = run(suite, "-q", "--shuffle", "11")
    result.assert_outcomes(passed=20)
    lines = [line for line in result.stdout.lines if line.strip()]
    assert "--shuffle 11" not in result.stdout.lines[0]
    assert lines[-2] == "shuffled order: --shuffle 11 repeats it"
    assert lines[-1].startswith("20 passed")


def test_commit_draws_the_seed_from_the_checked_out_commit(suite: pytest.Pytester) -> None:
    outside = run(suite, "-q", "--shuffle", "commit")
    assert outside.ret == pytest.ExitCode.USAGE_ERROR
    assert "is not a git checkout; give the seed as a number" in outside.stderr.str()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q"], cwd=suite.path, check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "x"], cwd=suite.path,
                   check=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=suite.path, check=True,
                          capture_output=True, text=True).stdout
    result = run(suite, "-v", "--shuffle", "commit")
    seed = int(head[:8], 16)
    assert f"shuffled order: --shuffle {seed} repeats it" in result.stdout.lines
    assert ran(result) == ran(run(suite, "-v", "--shuffle", str(seed)))
    assert len(ran(result)) == 20


def test_a_seed_that_is_not_a_number_is_one_usage_line(suite: pytest.Pytester) -> None:
    result = run(suite, "--shuffle", "x1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--shuffle: 'x1' is neither a number nor 'commit'" in result.stderr.str()
    assert "Traceback" not in result.stderr.str()


def test_ci_runs_the_readme_command_shuffled_by_the_commit() -> None:
    readme = (ROOT / "README.md").read_text()
    command = re.search(r"^(python -m pytest [^#\n]*?)\s+# kvreg's own test suite", readme,
                        re.M)
    assert command is not None
    # a step may run under tools/suite_cost.py (``... -- python -m pytest ...``)
    lines = [line.split(" -- ", 1)[-1] for line in (ROOT / ".ci" / "run").read_text().splitlines()
             if not line.startswith("#")]
    steps = [shlex.split(line) for line in lines if line.startswith("python -m pytest")]
    assert steps[-1] == [*shlex.split(command.group(1)), "-p", "tools.pytest_shuffle",
                         "--shuffle", "commit"]
