"""Scenario files: the format, its validation and loading (``format``).

Validation asks the target a scenario names about its own options; it imports no runner.
"""

from __future__ import annotations

from .format import (
    EXERCISES,
    EXPECTATIONS,
    FORMAT_VERSION,
    Scenario,
    ScenarioError,
    bundled_root,
    discover,
    load_file,
    load_paths,
)

__all__ = ["EXERCISES", "EXPECTATIONS", "FORMAT_VERSION", "Scenario", "ScenarioError",
           "bundled_root", "discover", "load_file", "load_paths"]
