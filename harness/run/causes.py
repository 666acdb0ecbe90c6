"""Root causes: failing scenarios grouped by the rule they broke and where in the code.

A run on real code fails many scenarios for few reasons (one broken error path fails every
scenario whose register call fails). A cause is a rule plus the ``path:line`` a violation of
it points at (:mod:`.callsite`); its scenarios are the failing ones with such a violation,
so every failing scenario is under at least one cause and the most frequent cause is the
first thing to fix. Errors (a run kvreg could not judge) are causes of the rule ``error``,
grouped by what ended them; kvreg's own crashes are causes of ``internal-error``, grouped
by kvreg's exception and line, never at a line of the code under test. Hints name a
documented design choice a group of failures matches, once per run.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from .endstate import undrainable
from .result import INTERNAL_ERROR, ScenarioResult, Violation
from .targets import style_contract

__all__ = ["Cause", "causes", "dedupe", "hints", "render_causes"]

_CALL_NO = re.compile(r"#\d+")
# the keyword by which a style gives register the store's MR limit (its StyleContract):
# where register was given it, MRs above it are the hint's subject
MR_LIMIT_KEYWORD = "max_mr_size"
_ERROR_TAIL = re.compile(r" (during|while|before|after) .*$")


def _shape(message: str) -> str:
    """A message with its call numbers masked: what repeats when code loops."""
    return _CALL_NO.sub("#?", message)


def dedupe(violations: Iterable[Violation]) -> list[Violation]:
    """Identical violations (same rule, site and message but for the call number) once,
    the first with the count, in first-seen order."""
    first: dict[tuple[str, str, str], int] = {}
    out: list[Violation] = []
    for v in violations:
        key = (v.rule, v.where, _shape(v.message))
        i = first.get(key)
        if i is None:
            first[key] = len(out)
            out.append(v)
        else:
            out[i] = replace(out[i], count=out[i].count + v.count)
    return out


@dataclass
class Cause:
    """One root cause: a rule broken at one place, and the scenarios that show it."""

    rule: str
    where: str
    code: str
    message: str                       # the first example's message
    ids: list[str] = field(default_factory=list)

    @property
    def scenarios(self) -> int:
        return len(self.ids)

    @property
    def example(self) -> str:
        return self.ids[0] if self.ids else ""

    def as_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "where": self.where, "code": self.code,
                "scenarios": self.scenarios, "example": self.example,
                "message": self.message}


def _internal_key(r: ScenarioResult) -> str:
    """What one kvreg bug shares across scenarios: its exception and innermost frame."""
    lines = [line for line in r.tb.splitlines() if line.strip()]
    frames = [line.strip() for line in lines if line.lstrip().startswith("File ")]
    return (frames[-1] if frames else "") + " " + (lines[-1] if lines else r.reason)


def causes(results: Sequence[ScenarioResult]) -> list[Cause]:
    """The causes of every failing or erroring scenario, most frequent first."""
    found: dict[tuple[str, str, str], Cause] = {}
    for r in results:
        if r.verdict == "fail":
            keys = [((v.rule, v.where, "" if v.where else _shape(v.message)), v)
                    for v in r.violations]
            for key, v in keys:
                c = found.setdefault(key, Cause(v.rule, v.where, v.code, v.message))
                if not c.ids or c.ids[-1] != r.id:
                    c.ids.append(r.id)
        elif r.verdict == "error":
            what = _ERROR_TAIL.sub("", r.reason)
            c = found.setdefault(("error", "", what), Cause("error", "", "", r.reason))
            c.ids.append(r.id)
        elif r.verdict == INTERNAL_ERROR:
            # kvreg's own bug: grouped by kvreg's exception, never at a line of the user's
            c = found.setdefault((INTERNAL_ERROR, "", _internal_key(r)),
                                 Cause(INTERNAL_ERROR, "", "", r.reason))
            c.ids.append(r.id)
    return sorted(found.values(), key=lambda c: (-c.scenarios, c.rule, c.where))


def hints(results: Sequence[ScenarioResult], *, pinning: str | None = None,
          style: str = "reference") -> list[str]:
    """Documented design choices the failures (and warnings, and skips) match, each said
    once."""
    out: list[str] = []
    unpinned = [r for r in results if r.verdict == "fail" and r.violations
                and all(v.rule == "registered" and "registered none of its" in v.message
                        for v in r.violations)]
    if unpinned and pinning is None:
        out.append(f"{len(unpinned)} scenario(s) fail only because register() returned "
                   "normally and pinned nothing. If the pool is left unpinned on purpose (a "
                   "pageable fallback, as vLLM's CPU offload does), run with --pinning "
                   "optional: then all-or-nothing passes and a partial pin still fails.")
    own = [r for r in results if r.verdict == "skip"
           and "compute its own MR limit" in r.reason]
    if own:
        out.append(f"{len(own)} Mooncake scenario(s) were skipped because they let register "
                   "compute its own MR limit (mooncake limit = \"own\"); if your register "
                   "does (as FastDeploy's connector does), give its max_mr_size the default "
                   "None and they run.")
    torch_pending = [r for r in results if any(undrainable(w) for w in r.warnings)]
    if torch_pending:
        first = next(w for w in torch_pending[0].warnings if undrainable(w))
        out.append(f"{len(torch_pending)} scenario(s) end with an error pending in torch's "
                   "runtime, which torch's binding cannot drain (it has no cudaGetLastError); "
                   f"e.g. {torch_pending[0].id}: {first.message}. A warning, not a failure, "
                   "and the same for every implementation registering through "
                   "torch.cuda.cudart(); to leave nothing pending, register and drain through "
                   "one runtime that has cudaGetLastError (docs/cuda-runtime.md §6). The JSON "
                   "report lists each instance.")
    over = [r for r in results if r.verdict == "fail"
            and any(v.rule == "mr-over-limit" for v in r.violations)]
    declared = style_contract(style)
    if over and declared is not None and MR_LIMIT_KEYWORD in declared.keywords:
        out.append(f"{len(over)} scenario(s) made MRs above the max_mr_size register was "
                   "given. A register that computes its own limit should still honour a "
                   "given one; the mooncake limit = \"own\" scenarios judge the limit it "
                   "computes itself.")
    undeclared = [r for r in results if r.verdict == "skip"
                  and r.reason.startswith("the implementation declares no ")]
    if undeclared:
        out.append(f"{len(undeclared)} scenario(s) were skipped because they judge only a "
                   "contract register does not declare (a granularity above the limit "
                   "refused before any call); give register the parameters without a None "
                   "default to be judged by it.")
    return out


def render_causes(found: Sequence[Cause], *, top: int = 10) -> list[str]:
    """The table's "causes" block: count, rule, ``path:line``, source line, an example."""
    if not found:
        return []
    lines = [f"causes ({len(found)}, most frequent first):"]
    for c in found[:top]:
        where = c.where or "(no line of the code under test)"
        lines.append(f"  {c.scenarios:>5} scenario(s)  [{c.rule}]  {where}"
                     + (f": {c.code}" if c.code else ""))
        lines.append(f"        e.g. {c.example}: {c.message}")
    if len(found) > top:
        rest = sum(c.scenarios for c in found[top:])
        lines.append(f"  ... and {len(found) - top} more cause(s) over {rest} "
                     "scenario-cause pair(s) (--json lists every cause)")
    return lines
