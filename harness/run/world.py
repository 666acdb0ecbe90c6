"""What every target's World shares (run/target.py's protocol): the call budget around the
implementation's steps, the trace its progress counts, where teardown starts, the record's
logs and call count, the copy coverage, and one guarded call of the implementation.

A target's world (its room's ``world.py``) subclasses :class:`TracedWorld` and adds what
only it knows: how it registers, moves pages, tears down and judges.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Protocol

from kvreg.fakes.protocol import Fake

from .budget import CallBudget
from .progress import Progress
from .result import CallBudgetExceeded

__all__ = ["Record", "TracedWorld", "next_seq"]


class Record(Protocol):
    """The parts of a target's run record the shared tails write."""

    logs: list[str]
    teardown_start: int | None
    budget_hit: int | None

    @property
    def trace(self) -> Sequence[Any]:
        """The calls recorded (taken at finish)."""


def next_seq(fake: Any) -> int:
    """The sequence number the next call recorded by ``fake`` (anything with a ``trace``)
    will get."""
    trace = fake.trace
    return int(trace[len(trace) - 1].seq) + 1 if len(trace) else 0


class TracedWorld:
    """A world over a fake (or a recorded real backend) whose trace records every call."""

    def __init__(self, fake: Fake, record: Record, budget: CallBudget) -> None:
        self.fake = fake
        self.record = record
        self.budget = budget          # counts the implementation's calls only
        self.progress = Progress()
        self.coverage: dict[str, Any] | None = None   # set by the copy step

    def implementation(self) -> AbstractContextManager[Any]:
        """Where the implementation's code runs: its calls spend the call budget."""
        return self.budget.implementation()

    def attempt(self, call: Callable[[], Any], *,
                counted: bool = True) -> tuple[Any, Exception | None]:
        """``call()``'s result, or the exception it raised; kvreg's own stops (the call
        budget, the memory limit) end the run instead. ``counted``: the implementation's
        code (it spends the call budget)."""
        try:
            with self.implementation() if counted else nullcontext():
                return call(), None
        except (CallBudgetExceeded, MemoryError):
            raise
        except Exception as exc:
            return None, exc

    def set_logs(self, logs: list[str]) -> None:
        self.record.logs = logs

    def watch(self, progress: Progress) -> None:
        self.progress = progress
        progress.watch(self.fake.trace)

    def fill(self) -> None:
        """The ``fill`` step: the engine writes its whole pool once register returned (a
        world on a fake host faults the pages in there; elsewhere nothing to model)."""

    def begin_teardown(self) -> None:
        self.record.teardown_start = next_seq(self.fake)

    def budget_spent(self) -> None:
        self.record.budget_hit = self.budget.spent

    def copy_coverage(self) -> dict[str, Any] | None:
        """How the copy step covered the pool's pages (None when it did not run or had
        no pages)."""
        return dict(self.coverage) if self.coverage else None

    def calls(self) -> int:
        return len(self.record.trace)

    def trace_text(self, limit: int) -> str:
        return str(self.fake.trace.format(limit=limit))
