"""Refused calls judged by their results, on the catalog's scenarios (issue 24 §4).

``declared_whole_then_chunks`` declares a chunk limit and tries the whole buffer first. On a
600 GiB pool under an R580+ driver the runtime refuses that call with 2 (the 512 GiB
per-call ceiling, docs/cuda-runtime.md §2.2): it registered nothing, so it broke no promise,
and the chunks that follow keep the limit. On a pool below the ceiling the same call succeeds
above the declared limit: chunk-over-limit, the code's own contract broken. When a chunk then
fails too, that chunk is the failure to name (error-swallowed, the unexpected-error sentence)
and to carry in the raised exception (error-reported), not the refused whole call.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from kvreg.harness.run.core import run_scenario
from kvreg.harness.run.implementation import make_implementation
from kvreg.harness.run.result import ScenarioResult
from kvreg.harness.scenario import Scenario

IMPL = Path(__file__).parent / "impls" / "declared_whole_then_chunks.py"
MLA = "mla/page_first_direct"
# the third call: the whole buffer, the first chunk, then this one (the second chunk)
CHUNK_FAULT = {"point": "cudart.cudaHostRegister", "nth": 3, "error": "cudaErrorInvalidValue"}
SECOND_CHUNK = "cudaHostRegister(kv_buffer+0x3ffff36000, "


def _run(sc: Scenario, entry: str = "register") -> ScenarioResult:
    return run_scenario(sc, make_implementation(f"{IMPL}:{entry}", f"{IMPL}:teardown",
                                                "generic"))


def _chunk_fails(by_id: dict[str, Scenario], expect: str) -> Scenario:
    return dataclasses.replace(by_id[f"{MLA}/over-ceiling-r580"], faults=(CHUNK_FAULT,),
                               expect=expect)


def test_a_refused_whole_call_breaks_no_declared_limit(by_id: dict[str, Scenario]) -> None:
    result = _run(by_id[f"{MLA}/over-ceiling-r580"])
    assert result.verdict == "pass", result.violations
    (w,) = [w for w in result.warnings if w.rule == "recovered"]
    assert w.message.startswith("cudaHostRegister(kv_buffer+0x0, 644244701184) (call #1) "
                                "returned 2 cudaErrorMemoryAllocation; register() recovered")


def test_the_same_call_accepted_below_the_ceiling_breaks_it(by_id: dict[str, Scenario]
                                                             ) -> None:
    result = _run(by_id[f"{MLA}/above-limit"])
    assert [v.rule for v in result.violations] == ["chunk-over-limit"]
    assert result.first_violation.startswith("call #1 registers 2675957760 bytes at "
                                             "kv_buffer+0x0, above the chunk limit 1073741824")


def test_a_chunk_failing_after_the_refusal_is_reported_and_passes(
        by_id: dict[str, Scenario]) -> None:
    # it raises "invalid argument", the chunk's error, not the refused call's 2
    result = _run(_chunk_fails(by_id, "register-error"))
    assert result.verdict == "pass", result.violations


def test_a_swallowed_chunk_failure_is_named_not_the_refusal(by_id: dict[str, Scenario]
                                                            ) -> None:
    result = _run(_chunk_fails(by_id, "register-error"), "register_swallows")
    assert [v.rule for v in result.violations] == ["error-swallowed"], result.violations
    assert result.first_violation.startswith(
        "cudaHostRegister returned 1 (invalid argument) at kv_buffer+0x3ffff36000 (call #3) "
        "but register() of kv_buffer returned normally: the pool would run partly unpinned")


def test_an_unexpected_error_names_the_chunk(by_id: dict[str, Scenario]) -> None:
    result = _run(_chunk_fails(by_id, "success"))
    assert [v.rule for v in result.violations] == ["unexpected-error"]
    message = result.first_violation
    assert SECOND_CHUNK in message and "returned 1 (invalid argument)" in message, message
    assert "per-call ceiling" not in message
