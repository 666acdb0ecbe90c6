"""Run one scenario and judge it (kept at this path for users' imports).

The runner core lives in :mod:`kvreg.harness.run.core`, its results in
:mod:`kvreg.harness.run.result`.
"""

from __future__ import annotations

from kvreg.harness.run.core import run_scenario
from kvreg.harness.run.result import CallBudgetExceeded, ScenarioResult

__all__ = ["CallBudgetExceeded", "ScenarioResult", "run_scenario"]
