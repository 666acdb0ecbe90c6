"""What every fake answers alike: FakeCuda, the verbs Fabric and FakeMooncake.

Each records the calls that reach it (``trace``), takes a fault plan (``faults``) and says
what the code left registered: ``live()`` (host registrations, MRs, store buffers; each
``describe()``-d on one line) and ``leak_report()`` (empty when nothing is left), which the
harness reads the same way whichever fake a run or a test used.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from .faults import FaultPlan
from .recorder import Trace

__all__ = ["Fake", "Live", "leak_text"]


class Live(Protocol):
    """One thing still registered."""

    def describe(self) -> str:
        """One line: where it is and what it covers."""


@runtime_checkable
class Fake(Protocol):
    """A fake's common answers."""

    @property
    def trace(self) -> Trace:
        """Every call that reached the fake, in order."""

    @property
    def faults(self) -> FaultPlan:
        """The fault plan its calls ask before acting."""

    def live(self) -> Sequence[Live]:
        """What is still registered."""

    def leak_report(self) -> str:
        """Empty when nothing is left registered; else one line per thing left."""


def leak_text(live: Sequence[Live], what: str) -> str:
    """A leak report: ``what`` counted on the first line, one line per thing (empty: none)."""
    if not live:
        return ""
    return "\n".join([f"{len(live)} {what}:", *(f"  {x.describe()}" for x in live)])
