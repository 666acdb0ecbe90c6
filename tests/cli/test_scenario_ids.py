"""Scenario ids do not depend on the folder kvreg runs from or on how a path is spelled.

The rule (kvreg.harness.scenario.ids) is pytest's: an id is the file's path from the
project's rootdir, as pytest finds it (https://docs.pytest.org/en/stable/reference/
customize.html, "Finding the rootdir"), then the scenario's name; kvreg's own catalog is
its own root. Before, an id was the path from whatever folder was given, so
``kvreg run kv`` and ``kvreg run kv/mla`` (or the file itself) named one scenario
``mla/pool/x`` and ``pool/x``, and a baseline written one way did not hold the other.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from _pytest.config.findpaths import determine_setup

from kvreg.harness.run.baseline import IDS_LINE, compare, load_baseline, parse_baseline
from kvreg.harness.run.result import ScenarioResult, Violation
from kvreg.harness.scenario.format import Scenario, bundled_root, load_file, load_paths
from kvreg.harness.scenario.ids import file_id, project_root

from ..helpers.paths import REPO, impl_spec
from ..helpers.scenario_text import ABOVE_LIMIT, BELOW_LIMIT, write_scenarios

IDS = {"kv/mla/pool/above-limit", "kv/mla/pool/below-limit"}


def _project(tmp_path: Path, marker: str = "pyproject.toml",
             text: str = "[project]\nname = 'p'\n") -> Path:
    """A user's repository: a project file at its root, scenarios two folders down."""
    root = tmp_path / "repo"
    (root / "kv" / "mla").mkdir(parents=True)
    (root / "python" / "pkg").mkdir(parents=True)
    (root / marker).write_text(text)
    write_scenarios(root / "kv" / "mla" / "pool.toml", ABOVE_LIMIT, BELOW_LIMIT)
    return root


def _ids(paths: list[Path]) -> set[str]:
    return {s.id for s in load_paths(paths)}


def test_every_folder_and_spelling_gives_the_same_ids(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    root = _project(tmp_path)
    (tmp_path / "link").symlink_to(root / "kv")
    spellings: list[tuple[Path, str]] = [
        (root, "kv"), (root, "./kv/"), (root, str(root / "kv")), (root, "kv/mla"),
        (root, "kv/mla/pool.toml"), (root, "./kv/mla/../mla/pool.toml"),
        (root / "python" / "pkg", "../../kv"), (root / "python" / "pkg", "../../kv/mla/"),
        (root / "kv" / "mla", "."), (root / "kv" / "mla", "pool.toml"),
        (tmp_path, str(tmp_path / "link")), (tmp_path, "link/mla/pool.toml")]
    for cwd, spelled in spellings:
        monkeypatch.chdir(cwd)
        assert _ids([Path(spelled)]) == IDS, (cwd, spelled)


def test_the_old_rule_would_fail_here(tmp_path: Path) -> None:
    """The defect itself: a subfolder or the file given named the scenario differently."""
    root = _project(tmp_path)
    whole, sub, file = (_ids([root / p]) for p in ("kv", "kv/mla", "kv/mla/pool.toml"))
    assert whole == sub == file == IDS
    # the old rule: the path from the folder given
    old = {p: {f"{(root / 'kv/mla/pool').relative_to(root / p).as_posix()}/{n}"
               for n in ("above-limit", "below-limit")} for p in ("kv", "kv/mla")}
    assert old["kv"] != old["kv/mla"]


def test_a_file_given_twice_loads_once(tmp_path: Path) -> None:
    root = _project(tmp_path)
    (tmp_path / "link").symlink_to(root / "kv")
    scenarios = load_paths([root / "kv", root / "kv" / "mla", tmp_path / "link"])
    assert sorted(s.id for s in scenarios) == sorted(IDS)


def test_bundled_catalog_keeps_its_ids() -> None:
    """kvreg's catalog is its own root, even inside a checkout with a pyproject.toml above."""
    root = bundled_root()
    catalog = load_paths()
    assert "mha/unregister_faults/teardown-runtime-unloading" in {s.id for s in catalog}
    for sc in catalog:
        assert sc.id == f"{sc.file.with_suffix('').relative_to(root).as_posix()}/{sc.name}"
    # however a catalog file is reached
    path = root / "mha" / "unregister_faults.toml"
    prefix = "mha/unregister_faults"
    assert file_id(path) == file_id(path, path.parent) == file_id(path, root) == prefix


@pytest.mark.parametrize(("marker", "text", "at_root"), [
    ("pyproject.toml", "[project]\nname = 'p'\n", True),            # any pyproject.toml
    ("pyproject.toml", "[tool.pytest.ini_options]\n", True),
    ("setup.py", "", True),
    ("pytest.ini", "", True),
    ("tox.ini", "[pytest]\n", True),
    ("tox.ini", "[testenv]\n", False),             # tox.ini without [pytest]: not a root
    ("setup.cfg", "[tool:pytest]\n", True),
    ("setup.cfg", "[flake8]\n", False),
])
def test_project_root_is_pytests_rootdir(tmp_path: Path, marker: str, text: str,
                                         at_root: bool) -> None:
    """Against pytest's own rootdir finder (run on the scenario file's folder)."""
    root = _project(tmp_path, marker, text)
    folder = (root / "kv" / "mla").resolve()
    mine = project_root(folder)
    assert (mine == root.resolve()) is at_root
    if mine is not None:
        assert mine == _pytest_rootdir(folder)


def test_the_nearest_pytest_configuration_wins(tmp_path: Path) -> None:
    """A sub-project's pytest configuration is its root, as for pytest, even with a
    pyproject.toml nearer that configures no pytest; setup.py counts only without either."""
    root = _project(tmp_path)                       # repo/pyproject.toml: no pytest table
    (root / "python" / "setup.py").write_text("")
    (root / "python" / "pkg" / "tests" / "kv").mkdir(parents=True)
    (root / "python" / "pkg" / "pyproject.toml").write_text("[project]\nname = 'pkg'\n")
    (root / "python" / "pytest.ini").write_text("[pytest]\n")
    file = root / "python" / "pkg" / "tests" / "kv" / "pool.toml"
    write_scenarios(file, ABOVE_LIMIT, BELOW_LIMIT)
    folder = file.parent.resolve()
    assert project_root(folder) == _pytest_rootdir(folder) == (root / "python").resolve()
    assert {s.id for s in load_file(file)} == {"pkg/tests/kv/pool/above-limit",
                                               "pkg/tests/kv/pool/below-limit"}


def test_without_a_project_ids_start_at_the_folder_given(tmp_path: Path) -> None:
    """No rootdir around the file: the folder given (a file's own folder), as before."""
    folder = tmp_path / "loose"
    (folder / "mla").mkdir(parents=True)
    write_scenarios(folder / "mla" / "pool.toml", ABOVE_LIMIT, BELOW_LIMIT)
    if project_root(folder.resolve()) is not None:
        pytest.fail(f"a project file above {tmp_path} makes this test meaningless")
    assert _ids([folder]) == {"mla/pool/above-limit", "mla/pool/below-limit"}
    assert _ids([folder / "mla" / "pool.toml"]) == {"pool/above-limit", "pool/below-limit"}


def _pytest_rootdir(folder: Path) -> Path:
    accepted = inspect.signature(determine_setup).parameters
    kwargs = {"inifile": None, "override_ini": None, "args": [str(folder)],
              "rootdir_cmd_arg": None, "invocation_dir": folder}
    rootdir = determine_setup(**{k: v for k, v in kwargs.items() if k in accepted})[0]
    return Path(rootdir).resolve()


# -- baselines -------------------------------------------------------------------------------

def _failing(sid: str) -> ScenarioResult:
    return ScenarioResult(id=sid, pool="mla", verdict="fail",
                          violations=[Violation("seams-aligned", "a seam cuts page 238")])


def test_a_baseline_of_old_ids_still_matches_and_says_so() -> None:
    """A file written before (no ids line) names the scenario by its path from the folder
    given; today's id ends with it, so the failure stays known."""
    old = parse_baseline("# kvreg baseline\nmla/pool/above-limit seams-aligned\n"
                         "mla/pool/below-limit leak\n", "old.txt")
    assert old.old_ids
    outcome = compare([_failing("kv/mla/pool/above-limit"),
                       ScenarioResult(id="kv/mla/pool/below-limit", pool="mla",
                                      verdict="pass")], old)
    assert outcome.ok and outcome.known == [("kv/mla/pool/above-limit", ("seams-aligned",))]
    # the line to delete is named as the file has it
    assert outcome.fixed == [("mla/pool/below-limit", "leak")]
    assert any("2 scenario(s) matched by the id they had before" in line and
               "mla/pool/above-limit is now kv/mla/pool/above-limit" in line
               for line in outcome.lines())


def test_a_baseline_of_todays_ids_matches_only_whole_ids() -> None:
    """With the ids line, a catalog entry (``mla/pool/above-limit``) never covers a user's
    copy of that file (``kv/mla/pool/above-limit``): its new failure is new."""
    new = parse_baseline(f"{IDS_LINE}\nmla/pool/above-limit seams-aligned\n", "new.txt")
    assert not new.old_ids
    outcome = compare([_failing("kv/mla/pool/above-limit"),
                       _failing("mla/pool/above-limit")], new)
    assert outcome.new == [("kv/mla/pool/above-limit", ("seams-aligned",))]
    assert outcome.known == [("mla/pool/above-limit", ("seams-aligned",))]
    assert not outcome.renamed


def test_a_written_baseline_carries_the_ids_line(tmp_path: Path) -> None:
    from kvreg.harness.run.baseline import write_baseline

    write_baseline(tmp_path / "b.txt", [_failing("kv/mla/pool/above-limit")])
    assert IDS_LINE in (tmp_path / "b.txt").read_text()
    assert not load_baseline(tmp_path / "b.txt").old_ids


def test_the_committed_baselines_name_scenarios_that_exist(catalog: list[Scenario]) -> None:
    """Every id in the repository's baselines is a scenario's id (exactly, or as an old
    id that today's id ends with), so none is silently dropped by a change of ids."""
    ids_of_catalog = {s.id for s in catalog}
    example = REPO / "examples" / "sglang_style_pool"
    own = {s.id for s in load_paths([example / "kv_scenarios"])}
    for path, ids in ((REPO / "tests" / "sglang_real" / "kvreg-baseline.txt", ids_of_catalog),
                      (example / "kvreg-baseline.txt", ids_of_catalog | own)):
        baseline = load_baseline(path)
        matched = {baseline.key(sid) for sid in ids} - {None}
        assert set(baseline.entries) <= matched, (path, set(baseline.entries) - matched)


# -- the CLI, from two folders, through three spellings ------------------------------------

def test_cli_ids_and_baseline_hold_across_folders_and_spellings(
        tmp_path: Path, kvreg_cli: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    root = _project(tmp_path)
    (tmp_path / "link").symlink_to(root / "kv")
    impl = impl_spec("byte_offset_seams")
    first = kvreg_cli("run", "kv", "--impl", impl, "-q", "--json", "a.json",
                      "--write-baseline", "kvreg-baseline.txt", cwd=root)
    assert first.returncode == 0, first.stdout + first.stderr
    written = load_baseline(root / "kvreg-baseline.txt")
    assert set(written.entries) == {"kv/mla/pool/above-limit"} and not written.old_ids
    for cwd, spelled in ((root / "python" / "pkg", "../../kv/mla/"),
                         (tmp_path, str(tmp_path / "link" / "mla" / "pool.toml"))):
        out = kvreg_cli("run", spelled, "--impl", impl, "-q", "--json",
                        str(cwd / "b.json"), "--baseline", os.path.relpath(
                            root / "kvreg-baseline.txt", cwd), cwd=cwd)
        text = out.stdout
        assert out.returncode == 0, text + out.stderr
        assert "1 scenario(s) fail as recorded, 0 new failure(s), 0 recorded failure(s) " \
               "gone" in text
        ids = {s["id"] for s in json.loads((cwd / "b.json").read_text())["scenarios"]}
        assert ids == IDS == {s["id"] for s in json.loads(
            (root / "a.json").read_text())["scenarios"]}
