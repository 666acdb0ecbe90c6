"""The built wheel holds every module and data file of the source tree.

A hand-written package list once left out ``kvreg.harness.pool_class``: an editable install
worked, every wheel install failed the fixtures built on it with ``ModuleNotFoundError``.
setup.py now finds the packages; this test builds a real wheel from a copy of the tree and
compares it with the files on disk, so a folder the build misses fails here.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("fakes", "harness", "realhw", "scenarios")
# documentation next to the code stays in the sdist; everything else must install
NOT_INSTALLED = {".md"}
SKIP_PARTS = {"__pycache__"}


def source_files(root: Path) -> set[str]:
    """Every installable file under the four folders, named as the wheel names it."""
    names: set[str] = set()
    for folder in FOLDERS:
        for path in (root / folder).rglob("*"):
            rel = path.relative_to(root)
            if (path.is_dir() or SKIP_PARTS & set(rel.parts)
                    or path.suffix in NOT_INSTALLED or path.suffix == ".pyc"):
                continue
            names.add(f"kvreg/{rel.as_posix()}")
    return names


def missing_from(wheel_names: set[str], root: Path) -> list[str]:
    return sorted(source_files(root) - wheel_names)


def _copy_tree(dest: Path) -> Path:
    """The files a build reads, without build/ or egg-info left by earlier builds."""
    ignore = shutil.ignore_patterns(".git", "build", "dist", "*.egg-info", "__pycache__",
                                    ".tox", ".venv", ".pp", "tests", "benchmarks")
    shutil.copytree(ROOT, dest, ignore=ignore)
    return dest


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory: pytest.TempPathFactory) -> set[str]:
    tmp = tmp_path_factory.mktemp("wheel")
    src = _copy_tree(tmp / "src")
    out = tmp / "dist"
    # no build isolation: the test environment has setuptools, and the sandbox no network
    code = ("import sys; from setuptools import build_meta as b; "
            "print(b.build_wheel(sys.argv[1]))")
    done = subprocess.run([sys.executable, "-c", code, str(out)], cwd=src,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    wheel = out / done.stdout.strip().splitlines()[-1]
    with zipfile.ZipFile(wheel) as zf:
        return set(zf.namelist())


def test_the_wheel_holds_every_module_and_data_file(wheel_names: set[str]) -> None:
    assert missing_from(wheel_names, ROOT) == []
    # the modules the fixtures of kvreg_host_memory / kvreg_pool_check import
    assert "kvreg/harness/pool_class/host_memory.py" in wheel_names
    # and the count is that of the tree, not of an old list
    modules = {n for n in wheel_names if n.endswith(".py")}
    assert len(modules) == len({n for n in source_files(ROOT) if n.endswith(".py")})


def test_the_wheel_has_the_entry_points(wheel_names: set[str]) -> None:
    assert any(n.endswith(".dist-info/entry_points.txt") for n in wheel_names)


def test_a_missing_subpackage_is_caught(tmp_path: Path) -> None:
    """The check itself: a wheel listing without one subpackage (the old hand-written list
    left out harness/pool_class) is reported, module by module."""
    full = source_files(ROOT)
    without = {n for n in full if not n.startswith("kvreg/harness/pool_class/")}
    missing = missing_from(without, ROOT)
    assert missing and all(m.startswith("kvreg/harness/pool_class/") for m in missing)
    assert "kvreg/harness/pool_class/__init__.py" in missing
    # a data file is caught as well as a module
    no_data = {n for n in full if not n.endswith(".tsv")}
    assert any(m.endswith(".tsv") for m in missing_from(no_data, ROOT))


def test_setup_finds_packages_instead_of_listing_them() -> None:
    """pyproject.toml keeps no package list (the list is what went stale)."""
    import tomllib

    tool = tomllib.loads((ROOT / "pyproject.toml").read_text()).get("tool", {})
    setuptools_cfg = tool.get("setuptools", {})
    assert "packages" not in setuptools_cfg and "package-dir" not in setuptools_cfg
