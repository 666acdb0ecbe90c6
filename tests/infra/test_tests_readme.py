"""tests/README.md maps every test folder to the rooms it tests, and names only paths that exist.

A folder added without a row, or a room renamed under the table, fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "tests" / "README.md"
ROW = re.compile(r"^\| `(tests/[\w/]+)/` \|", re.MULTILINE)
PATH = re.compile(r"`((?:fakes|harness|realhw|examples|scenarios)/[\w./]*)`")


def test_every_test_folder_has_a_row() -> None:
    rows = set(ROW.findall(README.read_text()))
    folders = {f"tests/{d.name}" for d in (ROOT / "tests").iterdir()
               if d.is_dir() and any(d.glob("test_*.py"))}
    assert folders - rows == set(), "test folders missing from tests/README.md"
    assert rows - folders == set(), "rows of tests/README.md naming no test folder"


def test_every_source_path_named_exists() -> None:
    named = set(PATH.findall(README.read_text()))
    assert named, "the table names no source room"
    missing = sorted(p for p in named if not (ROOT / p.rstrip("/")).exists())
    assert missing == []


_FROM_CONFTEST = re.compile(r"^\s*from\s+(\.+|tests\.\S+\.)?conftest\s+import", re.M)


def test_no_test_imports_from_a_conftest() -> None:
    """What test files share lives in tests/helpers/ (tests/README.md): a conftest holds only
    hooks and the fixtures it takes from there, so moving a folder never breaks an import."""
    offenders = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("*.py")
                       if _FROM_CONFTEST.search(p.read_text()))
    assert not offenders, f"import from tests/helpers/ instead: {offenders}"


def test_the_conftest_import_check_sees_each_spelling() -> None:
    for line in ("from .conftest import X", "from ..conftest import X",
                 "from conftest import X", "from tests.cuda_target.conftest import X"):
        assert _FROM_CONFTEST.search(f"import os\n{line}\n"), line
    assert not _FROM_CONFTEST.search("from ..helpers.paths import CUDA_IMPLS\n")
