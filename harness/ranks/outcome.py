"""How one rank's part of a call ended, as the caller judges it: returned, raised, exited,
killed, hung, or stopped because another rank failed first."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["RankOutcome", "died", "stopped"]


@dataclass(frozen=True)
class RankOutcome:
    """One rank's end of a call. ``kind`` is one of ``returned`` (``value``), ``raised``
    (``exc_type``, ``message``, ``traceback``), ``exited`` (``exitcode``: ``os._exit``),
    ``killed`` (``signal``), ``hung`` (past the call's timeout) or ``stopped`` (killed by
    kvreg because rank ``cause`` failed first); ``reason`` says it in one sentence."""

    rank: int
    kind: str
    value: Any = None
    exc_type: str = ""
    message: str = ""
    traceback: str = ""
    exitcode: int | None = None
    signal: int | None = None
    cause: int | None = None
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.kind == "returned"


def died(rank: int, exitcode: int | None, why: str) -> RankOutcome:
    """The outcome of a rank whose process ended with ``exitcode`` (negative: a signal)."""
    if exitcode is not None and exitcode < 0:
        return RankOutcome(rank, "killed", exitcode=exitcode, signal=-exitcode,
                           reason=f"rank {rank}: {why}")
    return RankOutcome(rank, "exited", exitcode=exitcode, reason=f"rank {rank}: {why}")


def stopped(rank: int, first: RankOutcome) -> RankOutcome:
    """A rank kvreg killed because rank ``first.rank`` failed while it still ran (it may have
    waited in a collective that could never complete)."""
    what = {"raised": f"raised {first.exc_type}", "exited": "died", "killed": "died",
            "hung": "hung"}.get(first.kind, first.kind)
    return RankOutcome(rank, "stopped", cause=first.rank,
                       reason=f"stopped: rank {first.rank} {what}")

