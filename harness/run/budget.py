"""The call budget: how many calls the implementation may make before it is stopped.

A fault rule on the target's call points (``cudart.*``, ``mooncake.*``) raises
:class:`~.result.CallBudgetExceeded` past the scenario's ``call_budget``, but it counts only
while the implementation runs (its register and teardown): kvreg's own calls (the copy
step's, the checks' queries, a store closed for the scenario) never spend the budget, so a
large pool whose register made 2 calls is not stopped by the calls kvreg made to copy it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .result import CallBudgetExceeded

__all__ = ["CallBudget"]


class CallBudget:
    """Counts the implementation's calls on ``points`` of a fault plan and stops it past
    ``limit``; :meth:`implementation` marks where the implementation runs."""

    def __init__(self, faults: Any, points: str, limit: int, what: str) -> None:
        self.counting = False
        self.rule = faults.arm(points, raise_=CallBudgetExceeded(
            f"call budget of {limit} {what} calls spent"), after=limit,
            predicate=self._counts)

    def _counts(self, _info: Any) -> bool:
        return self.counting

    _counts.reads_call = False   # type: ignore[attr-defined]  # the plan skips the buffer lookup

    @property
    def spent(self) -> int:
        """The implementation's calls counted so far (the one stopped included)."""
        return int(self.rule.calls)

    @contextmanager
    def implementation(self) -> Iterator[None]:
        """The implementation's own code runs inside: its calls count."""
        outer, self.counting = self.counting, True
        try:
            yield
        finally:
            self.counting = outer
