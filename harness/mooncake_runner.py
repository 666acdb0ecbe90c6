"""Mooncake scenarios: registration with the store over the fake RDMA fabric (placeholder).

Filled by the Mooncake scenarios work; until then a mooncake scenario is skipped with a reason.
"""

from __future__ import annotations

from typing import Any

from .adapters import Implementation
from .runner import ScenarioResult
from .scenario import Scenario


def validate_options(options: dict[str, Any]) -> list[str]:
    """Problems with a scenario's ``mooncake`` table (empty list when valid)."""
    return []


def run_mooncake_scenario(sc: Scenario, impl: Implementation, *,
                          keep_trace: bool = False) -> ScenarioResult:
    return ScenarioResult(sc.id, sc.pool, "skip", reason="mooncake scenarios are not built yet",
                          guards=sc.guards)
