"""tools/pytest_shuffle.py: a seed names one order of files and of tests within each file."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace
from typing import Any

SPEC = importlib.util.spec_from_file_location(
    "pytest_shuffle", Path(__file__).resolve().parents[2] / "tools" / "pytest_shuffle.py")
assert SPEC is not None and SPEC.loader is not None
shuffle = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(shuffle)

IDS = [f"tests/{f}.py::t{i}" for f in "abcd" for i in range(6)]


def order(seed: int | None) -> list[str]:
    config: Any = SimpleNamespace(getoption=lambda name: seed)
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
