"""The plugin names scenario items as ``kvreg run`` names scenarios, from any folder.

One rule computes ids (kvreg.harness.scenario.ids: the path from pytest's rootdir), so a
baseline ``kvreg run --write-baseline`` writes from one folder makes the same items strict
xfails in pytest run from another, however ``kvreg_scenarios`` spells the path.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# torch must already be imported here: pytester's in-process runs restore sys.modules.
import torch  # noqa: F401

from kvreg.harness.run.baseline import load_baseline

from ..helpers.paths import CUDA_IMPLS
from ..helpers.scenario_text import ABOVE_LIMIT, BELOW_LIMIT, write_scenarios

ITEMS = ["kv_scenarios/mla/pool.toml::kv_scenarios/mla/pool/above-limit",
         "kv_scenarios/mla/pool.toml::kv_scenarios/mla/pool/below-limit"]


def _project(pytester: pytest.Pytester, scenarios: str) -> Path:
    """A repository: pytest configured at its root, scenarios two folders down, the
    implementation under test beside them."""
    root = pytester.path
    write_scenarios(root / "kv_scenarios" / "mla" / "pool.toml", ABOVE_LIMIT, BELOW_LIMIT)
    (root / "src").mkdir()
    (root / "src" / "mypool.py").write_text((CUDA_IMPLS / "byte_offset_seams.py").read_text())
    pytester.makeini(f"[pytest]\nkvreg_scenarios = {scenarios}\n"
                     "kvreg_impl = src/mypool.py:register\nkvreg_style = sglang\n")
    return root


def _items(pytester: pytest.Pytester, *args: str) -> list[str]:
    result = pytester.runpytest("-p", "no:cacheprovider", "--collect-only", "-q", *args)
    return sorted(line for line in result.stdout.lines if "::" in line)


@pytest.mark.parametrize("spelled", ["kv_scenarios", "./kv_scenarios/", "kv_scenarios/mla",
                                     "kv_scenarios/mla/pool.toml"])
def test_items_have_one_id_however_the_ini_spells_the_folder(pytester: pytest.Pytester,
                                                             spelled: str) -> None:
    _project(pytester, spelled)
    assert _items(pytester) == ITEMS


def test_items_from_a_subfolder_and_an_absolute_path(pytester: pytest.Pytester,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    root = _project(pytester, "kv_scenarios")
    absolute = str(root / "kv_scenarios")
    assert _items(pytester, "--kvreg-scenarios", absolute + "/") == ITEMS
    monkeypatch.chdir(root / "src")
    assert _items(pytester, "../kv_scenarios") == ITEMS
    assert _items(pytester, str(root), "--kvreg-scenarios", absolute) == ITEMS


def test_cli_and_plugin_name_the_same_scenarios(pytester: pytest.Pytester) -> None:
    root = _project(pytester, "kv_scenarios")
    out = _kvreg("list", "../kv_scenarios/mla", cwd=root / "src")
    assert out.returncode == 0, out.stderr
    listed = sorted(line.split()[0] for line in out.stdout.splitlines() if "/" in line)
    assert listed == [item.split("::")[1] for item in ITEMS]


def test_a_baseline_written_by_the_cli_elsewhere_holds_in_pytest(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _project(pytester, "kv_scenarios")
    written = _kvreg("run", "mla/pool.toml", "--impl", "../src/mypool.py:register", "-q",
                     "--write-baseline", "../kvreg-baseline.txt", cwd=root / "kv_scenarios")
    assert written.returncode == 0, written.stdout + written.stderr
    assert set(load_baseline(root / "kvreg-baseline.txt").entries) == {
        "kv_scenarios/mla/pool/above-limit"}
    pytester.runpytest("-p", "no:cacheprovider", "--kvreg-baseline", "kvreg-baseline.txt"
                       ).assert_outcomes(passed=1, xfailed=1)
    monkeypatch.chdir(root / "src")
    result = pytester.runpytest("-p", "no:cacheprovider", "..", "--kvreg-baseline",
                                "../kvreg-baseline.txt", "-rx")
    result.assert_outcomes(passed=1, xfailed=1)
    result.stdout.fnmatch_lines(["*XFAIL*kv_scenarios/mla/pool/above-limit*known failure*"])


def test_a_baseline_of_old_ids_makes_the_same_xfails_and_says_so(
        pytester: pytest.Pytester) -> None:
    """A baseline written before (the path from the folder given, no ids line) still holds,
    and the summary says how to bring it up to date."""
    root = _project(pytester, "kv_scenarios")
    (root / "old.txt").write_text("# kvreg baseline\nmla/pool/above-limit seams-aligned\n"
                                  "mla/pool/above-limit transfer-failed\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "--kvreg-baseline", "old.txt")
    result.assert_outcomes(passed=1, xfailed=1)
    result.stdout.fnmatch_lines([
        "*kvreg baseline*",
        "1 scenario(s) matched by the id they had before ids were made the same wherever "
        "kvreg runs (e.g. mla/pool/above-limit is now kv_scenarios/mla/pool/above-limit)*"])


def _kvreg(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("CI", "SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB")}
    return subprocess.run([sys.executable, "-m", "kvreg.harness.cli", *args], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=600, check=False)
