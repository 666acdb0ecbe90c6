"""The real ``cuda.bindings`` modules: resolved once, and their public names as a snapshot.

Feature probes read ``dir(runtime)`` and ``hasattr`` (cuda-python's own tests ask whether a
name is in ``dir()`` before calling it), so the fake's faces list every public name the real
module has. The names come from the installed module when there is one and from the
committed snapshot ``data/cuda_bindings_names.tsv`` otherwise, so the faces look the same on
machines without cuda-bindings.

The real module is resolved once per process and never from a patched ``sys.modules``: a
fake built while another fake is patched in must still find the real binding, not the other
fake's face.
"""

from __future__ import annotations

import importlib
import sys
import types
from functools import cache
from importlib import resources
from typing import Any, Literal

from ..not_modelled import NotModelled

__all__ = ["HOST_ONLY_HELPERS", "SNAPSHOT", "Kind", "NotModelledError", "is_fake_module",
           "kind_of", "live_names", "not_modelled_stub", "public_names", "real_module",
           "remember_real", "render_snapshot", "snapshot_header", "snapshot_names"]

SNAPSHOT = "cuda_bindings_names.tsv"
Which = Literal["runtime", "driver"]
Kind = Literal["function", "type", "constant", "other"]

# Host-only helpers of cuda.bindings.runtime that need no driver: passed through to the real
# binding rather than modelled (their results are plain structs and numbers).
HOST_ONLY_HELPERS = frozenset({
    "make_cudaExtent", "make_cudaPitchedPtr", "make_cudaPos", "sizeof",
    "cudaCreateChannelDesc",
})

_REAL: dict[str, types.ModuleType | None] = {}


class NotModelledError(NotModelled):
    """Raised for a real cuda-python API the fake does not model (see COVERAGE.md)."""

    docs = ("a row in docs/cuda-runtime.md (what the real API returns, with its evidence "
            "label), its method on the fake's face and its SPEC_SECTION entry in "
            "fakes/cuda/coverage.py, then COVERAGE.md regenerated "
            "(python -m kvreg.fakes.cuda.coverage)")


def not_modelled_stub(module: str, name: str, *, reason: str = "") -> Any:
    """A callable standing for a real API the fake does not model: calling it raises.

    ``hasattr`` and ``dir()`` then answer as on the real module (feature probes see the
    name), while a call never returns success silently.
    """
    message = reason or (f"{module}.{name} is not modelled by kvreg's fake CUDA runtime; "
                         "see COVERAGE.md for what is modelled")

    def stub(*args: Any, **kwargs: Any) -> Any:
        raise NotModelledError(message, api=f"{module}.{name}")

    stub.__name__ = stub.__qualname__ = name
    stub.__doc__ = f"Not modelled: {message}"
    stub._kvreg_not_modelled = True  # type: ignore[attr-defined]
    return stub


def is_fake_module(module: object) -> bool:
    """True for kvreg's faces (and the recorder in front of them)."""
    return bool(getattr(type(module), "_kvreg_fake_module", False))


def remember_real(which: Which) -> types.ModuleType | None:
    """Resolve the real module now, before anything is patched (called by the patchers)."""
    return real_module(which)


def real_module(which: Which) -> types.ModuleType | None:
    """The installed ``cuda.bindings.<which>``, or None; never a fake patched in its place."""
    if which in _REAL:
        return _REAL[which]
    name = f"cuda.bindings.{which}"
    current = sys.modules.get(name)
    module: types.ModuleType | None = None
    if current is not None and not is_fake_module(current):
        module = current
    elif current is None:
        try:
            module = importlib.import_module(name)
        except ImportError:
            module = None
        if module is not None and is_fake_module(module):
            module = None
    else:
        # a fake sits in sys.modules and the real one was never imported by us: the loaded
        # extension is still reachable through the package's import machinery
        module = _import_bypassing(name)
    _REAL[which] = module
    return module


def _import_bypassing(name: str) -> types.ModuleType | None:
    """Import ``name`` while a fake occupies its ``sys.modules`` slot, then restore the fake."""
    saved = sys.modules.pop(name)
    parent = sys.modules.get(name.rpartition(".")[0])
    leaf = name.rpartition(".")[2]
    saved_attr = getattr(parent, leaf, None) if parent is not None else None
    try:
        module = importlib.import_module(name)
    except ImportError:
        module = None
    finally:
        sys.modules[name] = saved
        if parent is not None and saved_attr is not None:
            setattr(parent, leaf, saved_attr)
    return None if module is None or is_fake_module(module) else module


def kind_of(value: object) -> Kind:
    if isinstance(value, type):
        return "type"
    if callable(value):
        return "function"
    if isinstance(value, int | float | str | bytes):
        return "constant"
    return "other"


def live_names(which: Which) -> dict[str, Kind] | None:
    """Public names of the installed module with their kind, or None when it is absent."""
    module = real_module(which)
    if module is None:
        return None
    return {n: kind_of(getattr(module, n)) for n in dir(module) if not n.startswith("_")}


@cache
def _snapshot() -> tuple[str, dict[str, dict[str, Kind]]]:
    text = resources.files("kvreg.fakes.cuda").joinpath("data", SNAPSHOT).read_text()
    lines = text.splitlines()
    out: dict[str, dict[str, Kind]] = {"runtime": {}, "driver": {}}
    for line in lines[1:]:
        if not line.strip():
            continue
        which, name, kind = line.split("\t")
        out[which][name] = kind  # type: ignore[assignment]
    return lines[0].lstrip("# "), out


def snapshot_header() -> str:
    return _snapshot()[0]


def snapshot_names(which: Which) -> dict[str, Kind]:
    """Public names of the real module (committed snapshot) with their kind."""
    return dict(_snapshot()[1][which])


@cache
def public_names(which: Which) -> frozenset[str]:
    """What ``dir()`` of the real module lists (public names): installed, else snapshot."""
    live = live_names(which)
    return frozenset(live if live is not None else snapshot_names(which))


def render_snapshot(version: str) -> str:
    """The text of the snapshot file for the installed modules."""
    rows = [f"# cuda.bindings public names (runtime, driver), cuda-bindings {version}"]
    for which in ("runtime", "driver"):
        names = live_names(which)
        if names is None:
            raise RuntimeError("cuda-bindings is not installed")
        rows += [f"{which}\t{n}\t{k}" for n, k in sorted(names.items())]
    return "\n".join(rows) + "\n"
