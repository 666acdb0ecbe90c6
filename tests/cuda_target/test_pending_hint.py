"""An error pending in torch's runtime, which torch's binding cannot drain, is said once per run
(issue 24 §7): the same warning for every implementation through ``torch.cuda.cudart()``
(it has no cudaGetLastError, docs/cuda-runtime.md §6), so a line per scenario told a user
nothing to act on. The table gives it as one hint with its count; the JSON report keeps each
instance; the message says "after register returned" only where register returned.
"""

from __future__ import annotations

from typing import Any

from kvreg.harness.run.causes import hints
from kvreg.harness.run.endstate import UNDRAINABLE, Pending, check_error_pending, undrainable
from kvreg.harness.run.result import ScenarioResult, Violation

from ..helpers.kvreg_cli import run_json

MLA = "mla/page_first_direct"


def test_the_message_says_whether_the_step_returned_or_raised() -> None:
    returned = Pending("register", "torch", 2, "cudaErrorMemoryAllocation")
    raised = Pending("register", "torch", 2, "cudaErrorMemoryAllocation", returned=False)
    (w1,) = check_error_pending([returned], fallback=False)[1]
    (w2,) = check_error_pending([raised], fallback=False)[1]
    assert w1.message.startswith("after register returned, torch's runtime still holds "
                                 "cudaErrorMemoryAllocation (2)")
    assert w2.message.startswith("after register raised, torch's runtime still holds")
    assert undrainable(w1) and undrainable(w2) and w2.message.endswith(UNDRAINABLE)
    # one cuda-python could drain is a violation, never the run-wide hint
    (v,) = check_error_pending([Pending("teardown", "cuda-bindings", 4, "x", False)],
                               fallback=False)[0]
    assert v.message.startswith("after teardown raised,") and not undrainable(v)


def _result(sid: str, warnings: list[Violation]) -> ScenarioResult:
    return ScenarioResult(sid, "mla", "pass", [], warnings=warnings)


def test_one_hint_counts_the_scenarios() -> None:
    torch = check_error_pending([Pending("register", "torch", 2, "cudaErrorMemoryAllocation",
                                         returned=False)], fallback=False)[1]
    other = [Violation("recovered", "cudaHostRegister(...) returned 2; register() recovered",
                       1)]
    results = [_result("a/x", torch), _result("a/y", other), _result("a/z", torch + other)]
    (hint,) = hints(results)
    assert hint.startswith("2 scenario(s) end with an error pending in torch's runtime, which "
                           "torch's binding cannot drain (it has no cudaGetLastError); e.g. "
                           "a/x: after register raised,")
    assert hints([_result("a/y", other)]) == []


def test_kvreg_run_says_it_once_and_the_json_keeps_each(kvreg_cli: Any, spec_of: Any) -> None:
    args = ("run", "--style", "generic", "--impl", spec_of("no_contract_one_call"), "-k",
            f"{MLA}/fail-")
    table = kvreg_cli(*args).stdout
    assert "warning [error-pending]" not in table
    said = [line for line in table.splitlines()
            if "end with an error pending in torch's runtime" in line]
    assert len(said) == 1 and said[0].startswith("hint: ")
    doc = run_json(*args[1:]).doc
    each = {s["id"]: w["message"] for s in doc["scenarios"] for w in s["warnings"]
            if w["rule"] == "error-pending"}
    assert said[0].startswith(f"hint: {len(each)} scenario(s) ") and len(each) >= 2
    # fail-first-chunk: the one call fails and register raises
    assert each[f"{MLA}/fail-first-chunk"].startswith("after register raised, torch's runtime "
                                                      "still holds cudaErrorMemoryAllocation")
    # fail-during-rollback: one call per buffer makes no rollback call, so the unregister
    # fault lands in its only teardown, which keeps the range and returns (fail-during-teardown
    # judges a repeatable teardown, which this code does not declare: skipped)
    assert each[f"{MLA}/fail-during-rollback"].startswith("after teardown returned,")
