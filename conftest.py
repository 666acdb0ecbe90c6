"""Root test configuration: Hypothesis profiles (pytester is enabled with -p in pyproject), and
the tier of expensive property runs: tests marked ``expensive_property`` are deselected (and
counted as such) unless ``--expensive-properties`` is given, so the README's test command
stays short while CI still runs them in a step of their own."""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

# `ci`: deterministic and bounded (2-core runners); `dev`: more examples for local digging.
settings.register_profile(
    "ci", max_examples=60, deadline=None, derandomize=True, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=300, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_addoption(parser: Any) -> None:
    parser.addoption("--expensive-properties", action="store_true", default=False,
                     help="also run the tests marked expensive_property (Hypothesis runs of "
                          "hundreds of examples); with -m expensive_property, only those")


def pytest_collection_modifyitems(config: Any, items: list[pytest.Item]) -> None:
    if config.getoption("--expensive-properties"):
        return
    expensive = [item for item in items if item.get_closest_marker("expensive_property")]
    if expensive:
        config.hook.pytest_deselected(items=expensive)
        items[:] = [item for item in items if not item.get_closest_marker("expensive_property")]
