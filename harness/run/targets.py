"""The target registry: a target's name -> the module that holds it, imported on first use.

It imports no target at module level, so scenario validation can ask a target about its
options without the runner, and a target's fakes load only when a scenario names it.
Importing a target also declares its fakes' fault points (``mooncake.*``, ``verbs.*``).
What the generic layers need from every target at once (the environment variables they
watch, the machine a worker imports under by default, how each style declares its contract)
is read here from the targets.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, cast

from .target import ProcessConfig

if TYPE_CHECKING:
    from .contract import StyleContract
    from .target import Target

__all__ = ["DEFAULT_TARGET", "REFERENCE_STYLE", "TARGETS", "default_configs", "get_target",
           "option_tables", "style_contract", "user_styles", "watched_env"]

# name -> module whose TARGET attribute is the target object
TARGETS: dict[str, str] = {
    "cuda": "kvreg.harness.cuda.target",
    "mooncake": "kvreg.harness.mooncake.target",
    "gpu_rdma": "kvreg.harness.gpu_rdma.target",
}
# kvreg's own registration, which every target has (its reference.py)
REFERENCE_STYLE = "reference"
# the target of a scenario that names none
DEFAULT_TARGET = "cuda"


def get_target(name: str) -> Target:
    """The target called ``name`` (KeyError naming the known ones otherwise)."""
    try:
        module = TARGETS[name]
    except KeyError:
        raise KeyError(f"unknown target {name!r}; known: {', '.join(TARGETS)}") from None
    return cast("Target", importlib.import_module(module).TARGET)


_WATCHED: list[tuple[tuple[tuple[str, str], ...], tuple[str, ...]]] = []


def watched_env() -> tuple[str, ...]:
    """Every registered target's watched variables (computed again only when the registry
    changes: it is asked on every ``os.environ`` read of a worker, process.py)."""
    key = tuple(TARGETS.items())
    if _WATCHED and _WATCHED[0][0] == key:
        return _WATCHED[0][1]
    names: list[str] = []
    for name in TARGETS:
        names += [v for v in get_target(name).watched_env if v not in names]
    _WATCHED[:] = [(key, tuple(names))]
    return tuple(names)


def default_configs() -> dict[str, ProcessConfig]:
    """name -> the configuration of each target's default machine (what an import sees
    when no scenario has chosen one yet)."""
    return {name: ProcessConfig(name, (), get_target(name).default_machine)
            for name in TARGETS}


def option_tables() -> dict[str, str]:
    """A scenario's table of target options -> the target it belongs to (every target that
    reads a table of its own, Target.options_table)."""
    tables = {}
    for name in TARGETS:
        key = get_target(name).options_table
        if key is not None:
            tables[key] = name
    return tables


def user_styles() -> tuple[str, ...]:
    """Every style an implementation under test can take, in registry order: each room's
    ``STYLES`` (its package, which imports nothing, so the CLI's and the plugin's choices
    cost no target import)."""
    found: dict[str, None] = {}
    for module in TARGETS.values():
        room = importlib.import_module(module.rsplit(".", 1)[0])
        # a target that runs only its reference declares none
        found.update(dict.fromkeys(cast("tuple[str, ...]", getattr(room, "STYLES", ()))))
    return tuple(found)


def style_contract(style: str) -> StyleContract | None:
    """How ``style`` declares its contract (contract.StyleContract), from the first target
    that describes it (Target.style_contracts), or None where none does."""
    for name in TARGETS:
        found = get_target(name).style_contracts.get(style)
        if found is not None:
            return found
    return None
