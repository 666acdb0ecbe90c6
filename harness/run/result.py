"""What a run returns: the verdict, its violations, and the budget that stops a loop.

Shared by every target, so neither target imports the other's types.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["CallBudgetExceeded", "ScenarioResult", "Violation"]


class CallBudgetExceeded(BaseException):
    """Raised inside a runtime call once a scenario's call budget is spent.

    A BaseException, so an implementation's ``except Exception`` cannot swallow it.
    """


@dataclass(frozen=True)
class Violation:
    rule: str
    message: str
    seq: int = 1 << 62   # trace position, for ordering

    def as_dict(self) -> dict[str, str]:
        return {"rule": self.rule, "message": self.message}


@dataclass
class ScenarioResult:
    id: str
    pool: str
    verdict: str                    # "pass" | "fail" | "error" | "skip"
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

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "pool": self.pool, "verdict": self.verdict,
                "violations": [v.as_dict() for v in self.violations],
                "warnings": [w.as_dict() for w in self.warnings],
                **({"reason": self.reason} if self.reason else {}),
                **({"copy": self.copy} if self.copy is not None else {})}

    @property
    def first_violation(self) -> str:
        if self.violations:
            return self.violations[0].message
        return self.reason
