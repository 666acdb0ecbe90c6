"""The CUDA fake's room (fakes/cuda/) and the earlier import paths of its modules.

Code written against ``kvreg.fakes.profile`` or ``from kvreg.fakes import errors`` keeps
working, and gets the very module object ``kvreg.fakes.cuda.*`` is, so a monkeypatch on one
name is seen through the other.
"""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import kvreg.fakes as fakes

MOVED = sorted(fakes._MOVED)


@pytest.mark.parametrize("name", MOVED)
def test_old_path_is_the_same_module(name: str) -> None:
    old = importlib.import_module(f"kvreg.fakes.{name}")
    new = importlib.import_module(f"kvreg.fakes.cuda.{name}")
    assert old is new
    assert getattr(fakes, name) is new


def test_old_path_first_in_a_fresh_process() -> None:
    """Imported under the old name before anything else, the module is still executed once,
    under its new name."""
    code = ("import sys, kvreg.fakes.profile as p; import kvreg.fakes.cuda.profile as q; "
            "assert p is q and p.__name__ == 'kvreg.fakes.cuda.profile'; "
            "assert sys.modules['kvreg.fakes.profile'] is q; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"


def test_unknown_names_still_fail() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("kvreg.fakes.no_such_module")
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = fakes.no_such_name  # type: ignore[attr-defined]


def test_shared_machinery_stays_at_the_top() -> None:
    """faults, recorder, patching, procmaps and the address space serve every fake."""
    for name in ("faults", "recorder", "patching", "procmaps", "address_space"):
        mod = importlib.import_module(f"kvreg.fakes.{name}")
        assert mod.__name__ == f"kvreg.fakes.{name}"
