"""The CUDA fake's room (fakes/cuda/) holds its modules under one path each.

kvreg is 0.1.0 and unpublished, so the paths these modules had before ``fakes/cuda/`` held them
(``kvreg.fakes.profile``, ...) are gone rather than aliased (issue 26 §3): an alias is a
second name mypy cannot follow and a patch on one name that the other may not see.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import kvreg.fakes as fakes

ROOT = Path(__file__).resolve().parents[2]
CUDA_MODULES = sorted(p.stem for p in (ROOT / "fakes" / "cuda").glob("*.py")
                      if p.stem != "__init__")


def test_the_cuda_room_holds_the_engine() -> None:
    """The modules ARCHITECTURE.md names for fakes/cuda/ are there (a guard on the list below)."""
    assert {"cuda_runtime", "cuda_driver", "profile", "errors", "fake_cuda",
            "torch_face"} <= set(CUDA_MODULES)


def test_old_top_level_paths_do_not_import() -> None:
    """In a fresh process, so a module this session imported cannot answer for it."""
    old = [n for n in CUDA_MODULES
           if not (ROOT / "fakes" / f"{n}.py").exists() and not (ROOT / "fakes" / n).is_dir()]
    assert len(old) >= 16       # the modules that had a top-level path before fakes/cuda/
    code = ("import importlib, sys\nfor name in sys.argv[1:]:\n    try:\n"
            "        importlib.import_module('kvreg.fakes.' + name)\n"
            "    except ModuleNotFoundError:\n        continue\n    print(name)\n")
    out = subprocess.run([sys.executable, "-c", code, *old], capture_output=True, text=True,
                         check=True)
    assert out.stdout.split() == []


def test_no_import_hook_of_kvreg() -> None:
    importlib.import_module("kvreg.fakes.cuda.profile")
    hooks = [type(f).__module__ for f in sys.meta_path]
    assert not [m for m in hooks if m.startswith("kvreg")], hooks


def test_lazy_names_still_resolve() -> None:
    """``from kvreg.fakes import FakeCuda`` (README) stays: a name, not a module alias."""
    from kvreg.fakes.cuda.fake_cuda import FakeCuda
    from kvreg.fakes.cuda.profile import PROFILES

    assert fakes.FakeCuda is FakeCuda
    assert fakes.PROFILES is PROFILES
    with pytest.raises(AttributeError, match="profile"):
        _ = fakes.profile  # type: ignore[attr-defined]


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
