"""What a run returns: the verdict, its violations, and the budget that stops a loop.

Shared by every target, so neither target imports the other's types.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from typing import Any

__all__ = ["INTERNAL_ERROR", "REPORT_REQUEST", "CallBudgetExceeded", "ScenarioResult",
           "Violation", "internal_error", "whole_message"]

# the verdict of a run that kvreg itself broke: never a cause in the code under test
INTERNAL_ERROR = "internal-error"
REPORT_REQUEST = ("this is a bug in kvreg, not in the code under test: please report it with "
                  "the scenario id and this traceback")

# a message longer than this is cut, saying so (an implementation may raise anything)
_MAX_MESSAGE = 4000


def whole_message(text: object) -> str:
    """An exception's message on one line, whole: its lines joined with " " (torch's
    binding errors list the accepted signatures on the lines after "supported:")."""
    lines = [" ".join(line.split()) for line in str(text).splitlines()]
    joined = " ".join(line for line in lines if line)
    if len(joined) > _MAX_MESSAGE:
        return joined[:_MAX_MESSAGE] + f"... ({len(joined) - _MAX_MESSAGE} more characters)"
    return joined


class CallBudgetExceeded(BaseException):
    """Raised inside a runtime call once a scenario's call budget is spent.

    A BaseException, so an implementation's ``except Exception`` cannot swallow it.
    """


@dataclass(frozen=True)
class Violation:
    rule: str
    message: str
    seq: int = 1 << 62   # trace position, for ordering
    # where in the code under test it happened (``path:line`` as the user would open it)
    # and that line's source; filled in the worker, where the code ran (.callsite)
    where: str = ""
    code: str = ""
    count: int = 1       # identical violations of one scenario, shown once

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rule": self.rule, "message": self.message}
        if self.where:
            out["where"] = self.where
            out["code"] = self.code
        if self.count > 1:
            out["count"] = self.count
        return out


@dataclass
class ScenarioResult:
    id: str
    pool: str
    verdict: str                    # "pass" | "fail" | "error" | "skip" | "internal-error"
    violations: list[Violation] = field(default_factory=list)
    reason: str = ""
    # what passes but deserves a line in the report (recovered failures, pending errors)
    warnings: list[Violation] = field(default_factory=list)
    guards: str = ""
    calls: int = 0
    seconds: float = 0.0
    trace_text: str = ""
    # how the copy step covered the pages: {"pages_copied", "pages_total", "method"}
    copy: dict[str, Any] | None = None
    # an internal-error's traceback (kvreg's frames), for the report that asks for a fix
    tb: str = ""
    # a many-rank scenario's ranks: [{"rank", "verdict", "violations"[, "reason"]}] (None
    # for a single process's run: the report has no "ranks" then)
    ranks: list[dict[str, Any]] | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "pool": self.pool, "verdict": self.verdict,
                "violations": [v.as_dict() for v in self.violations],
                "warnings": [w.as_dict() for w in self.warnings],
                **({"reason": self.reason} if self.reason else {}),
                **({"copy": self.copy} if self.copy is not None else {}),
                **({"traceback": self.tb} if self.tb else {}),
                **({"ranks": self.ranks} if self.ranks is not None else {})}

    @property
    def first_violation(self) -> str:
        if self.violations:
            return self.violations[0].message
        return self.reason


def internal_error(result: ScenarioResult, exc: BaseException, during: str) -> ScenarioResult:
    """``result`` turned into the internal-error verdict of ``exc``, raised inside kvreg
    ``during`` one of its own steps: its violations dropped (nothing kvreg judged after
    breaking can be trusted), the traceback kept, a report asked for."""
    text = whole_message(exc)
    what = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    result.verdict = INTERNAL_ERROR
    result.violations, result.warnings = [], []
    result.reason = f"kvreg internal error {during}: {what} ({REPORT_REQUEST})"
    result.tb = "".join(traceback.format_exception(exc)).rstrip()
    return result
