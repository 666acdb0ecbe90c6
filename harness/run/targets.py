"""The target registry: a target's name -> the module that holds it, imported on first use.

It imports no target at module level, so scenario validation can ask a target about its
options without the runner, and a target's fakes load only when a scenario names it.
Importing a target also declares its fakes' fault points (``mooncake.*``, ``verbs.*``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from .target import Target

__all__ = ["TARGETS", "get_target"]

# name -> module whose TARGET attribute is the target object
TARGETS: dict[str, str] = {
    "cuda": "kvreg.harness.cuda.target",
    "mooncake": "kvreg.harness.mooncake.target",
}


def get_target(name: str) -> Target:
    """The target called ``name`` (KeyError naming the known ones otherwise)."""
    try:
        module = TARGETS[name]
    except KeyError:
        raise KeyError(f"unknown target {name!r}; known: {', '.join(TARGETS)}") from None
    return cast("Target", importlib.import_module(module).TARGET)
