"""Every rule of the checks catches a deliberately broken implementation on a bundled scenario.

Each case names the broken implementation (``impls/<name>.py``), its style, a bundled
scenario that must catch it, the rule that must fire, and words the message must contain so
a user can act on it (buffer, offset, page, call, code). A control scenario, where the
same bug has no effect, must pass: the rule fires because of the bug, not regardless of it.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from kvreg.harness.run.core import run_scenario
from kvreg.harness.run.result import ScenarioResult

MLA = "mla/page_first_direct"


@dataclass(frozen=True)
class Case:
    impl: str
    style: str
    scenario: str
    rule: str
    words: tuple[str, ...]
    control: str | None
    first: bool = True            # the expected rule is the first violation reported

    def __str__(self) -> str:
        return f"{self.impl}@{self.scenario}"


CASES = [
    # seams every 1 GiB cut page 238 of a 4.5 MiB-page MLA pool (sglang PR #36798)
    Case("byte_offset_seams", "sglang", f"{MLA}/above-limit", "transfer-failed",
         ("page 238 of kv_buffer", "[1070383104, 1074880512)", "spans registrations at offset "
          "1073741824", "cudaMemcpyBatchAsync returns 1"), f"{MLA}/below-limit"),
    Case("byte_offset_seams", "sglang", "regressions/cuda_byte_offset_seams/page-first-1gib-chunks",
         "transfer-failed", ("page 238 of kv_buffer", "spans registrations at offset 1073741824"),
         None),
    Case("no_rollback", "sglang", f"{MLA}/fail-middle-chunk", "not-rolled-back",
         ("chunk [kv_buffer+0x0, +1070383104)", "after register() of kv_buffer failed",
          "no rollback"), f"{MLA}/fail-first-chunk"),
    Case("no_rollback", "sglang", "regressions/cuda_no_rollback/second-chunk-out-of-memory",
         "not-rolled-back", ("chunk [kv_buffer+0x0,", "no rollback"), None),
    Case("errors_only_logged", "sglang", f"{MLA}/fail-first-chunk", "error-swallowed",
         ("cudaHostRegister returned 2 (out of memory) at kv_buffer+0x0 (call #1)",
          "register() of kv_buffer returned normally", "it only logged",
          "rc=2 at offset=0"), f"{MLA}/below-limit"),
    Case("errors_only_logged", "sglang",
         "regressions/cuda_errors_only_logged/invalid-value-on-low-host-ram", "error-swallowed",
         ("returned 1 (invalid argument) at kv_buffer+0x0", "run unpinned"), None),
    # teardown twice: the second one unregisters bases that are already gone (713)
    Case("double_unregister", "sglang", f"{MLA}/above-limit", "unregister-not-a-live-base",
         ("unregisters kv_buffer+0x7f998000, which was already released",
          "713 cudaErrorHostMemoryNotRegistered"), f"{MLA}/fail-first-chunk"),
    Case("interior_pointer", "generic", f"{MLA}/above-limit", "unregister-not-a-live-base",
         ("unregisters kv_buffer+0x8f8cb000, which is inside a registration, not its base",
          "1 cudaErrorInvalidValue"), f"{MLA}/fail-first-chunk"),
    Case("never_unregisters", "sglang", f"{MLA}/above-limit", "leak",
         ("chunk [kv_buffer+0x0, +1070383104) was never released by teardown",),
         f"{MLA}/fail-first-chunk"),
    Case("forgets_failed_chunks", "generic", f"{MLA}/fail-during-teardown", "leak",
         ("chunk [kv_buffer+0x7f998000, +4497408) was never released",
          "teardown lost track of it after cudaHostUnregister failed"), f"{MLA}/above-limit"),
    # 238 pages fill one chunk exactly: `off <= total` adds a 0-byte call at the buffer's end
    Case("zero_size_trailing_chunk", "sglang", f"{MLA}/at-limit", "register-size-zero",
         ("call #2 registers 0 bytes at kv_buffer+0x3fccc000 (the end of kv_buffer)",),
         f"{MLA}/last-partial-chunk"),
    Case("over_limit_chunks", "generic", f"{MLA}/above-limit", "chunk-over-limit",
         ("call #1 registers 1074880512 bytes at kv_buffer+0x0",
          "above the chunk limit 1073741824"), f"{MLA}/below-limit"),
    Case("past_end", "generic", f"{MLA}/last-partial-chunk", "range-outside-buffer",
         ("call #3 registers [kv_buffer+0x7f998000, +1070383104)", "not inside one pool buffer"),
         f"{MLA}/at-limit"),
    # 16384-token pages of 1151336448 bytes against a 1 GiB limit
    Case("accepts_big_granularity", "sglang", f"{MLA}/granularity-above-limit", "not-rejected",
         ("accepted granularity 1151336448 of kv_buffer with chunk limit 1073741824",
          "must raise before any call"), f"{MLA}/below-limit", first=False),
    Case("type_error", "generic", f"{MLA}/granularity-above-limit", "rejected-wrong-error",
         ("register() of kv_buffer rejected the granularity with TypeError",
          "expected ValueError"), f"{MLA}/below-limit"),
    Case("late_rejection", "sglang", f"{MLA}/granularity-above-limit", "rejected-too-late",
         ("register() of kv_buffer made 1 cudaHostRegister call(s) before rejecting "
          "granularity 1151336448 > limit 1073741824",), f"{MLA}/below-limit", first=False),
    Case("strict_divisor", "sglang", f"{MLA}/below-limit", "unexpected-error",
         ("register() of kv_buffer raised ValueError", "granularity 4497408"),
         "mla/layer_first/below-limit"),
    Case("teardown_not_idempotent", "sglang", f"{MLA}/below-limit", "teardown-raised",
         ("teardown #2 of kv_buffer raised RuntimeError: host pool was already torn down",),
         f"{MLA}/fail-first-chunk"),
    # a rollback that swallows its unregister failure keeps every chunk listed; a teardown
    # after the failed register then unregisters the released ones (713)
    Case("stale_rollback_list", "sglang",
         "mla/unregister_faults/rollback-unregister-fails-then-teardown-twice",
         "unregister-not-a-live-base",
         ("call #9 unregisters kv_buffer+0x7f998000, which was already released",
          "713 cudaErrorHostMemoryNotRegistered"),
         "mla/unregister_faults/rollback-second-unregister-fails"),
    # one 600 GiB call fails forever on R580+; retrying it is stopped by the call budget
    Case("infinite_retry", "sglang", "mha/layer_first/over-ceiling-r580", "call-budget",
         ("stopped after 100001 runtime calls", "loops or never finishes"),
         "mha/layer_first/below-limit"),
]


def _run(by_id, load_impl, name: str, style: str, sid: str) -> ScenarioResult:
    assert sid in by_id, f"bundled scenario {sid} is missing from the catalog"
    return run_scenario(by_id[sid], load_impl(name, style))


@pytest.mark.parametrize("case", CASES, ids=str)
def test_broken_implementation_is_caught(case: Case, by_id, load_impl) -> None:
    result = _run(by_id, load_impl, case.impl, case.style, case.scenario)
    rules = [v.rule for v in result.violations]
    assert result.verdict == "fail", (case, result.violations)
    assert case.rule in rules, rules
    if case.first:
        assert rules[0] == case.rule, rules
    message = next(v.message for v in result.violations if v.rule == case.rule)
    for words in case.words:
        assert words in message, message
    # the trace of a failing run is kept for the user (empty only when no call was made)
    assert result.trace_text or result.calls == 0


@pytest.mark.parametrize("case", [c for c in CASES if c.control], ids=str)
def test_broken_implementation_passes_where_its_bug_is_harmless(case: Case, by_id,
                                                                 load_impl) -> None:
    assert case.control is not None
    result = _run(by_id, load_impl, case.impl, case.style, case.control)
    assert result.verdict == "pass", result.violations


def test_every_rule_catches_some_broken_implementation() -> None:
    from pathlib import Path

    from kvreg.harness.cuda import checks

    source = Path(checks.__file__).read_text()
    rules = {r for r in (
        "call-budget", "register-size-zero", "range-outside-buffer", "chunk-over-limit",
        "error-swallowed", "unexpected-error", "not-rejected", "rejected-too-late",
        "rejected-wrong-error", "transfer-failed", "unregister-not-a-live-base",
        "not-rolled-back", "leak", "teardown-raised") if f'"{r}"' in source}
    assert len(rules) == 14, "a rule of checks.py was renamed: update this proof"
    assert rules == {c.rule for c in CASES}


def test_interior_pointer_also_leaks_every_chunk(by_id, load_impl) -> None:
    result = _run(by_id, load_impl, "interior_pointer", "generic", f"{MLA}/above-limit")
    leaks = [v.message for v in result.violations if v.rule == "leak"]
    bad = [v.message for v in result.violations if v.rule == "unregister-not-a-live-base"]
    # 595 pages of 4.5 MiB in 1 GiB chunks: 3 chunks, each refused once per teardown round
    assert len(leaks) == 3 and len(bad) >= 3
    assert {m.split(",")[0] for m in leaks} == {
        "chunk [kv_buffer+0x0", "chunk [kv_buffer+0x3fccc000", "chunk [kv_buffer+0x7f998000"}


def test_double_unregister_names_every_chunk_once_per_extra_teardown(by_id, load_impl) -> None:
    result = _run(by_id, load_impl, "double_unregister", "sglang", f"{MLA}/above-limit")
    assert {v.rule for v in result.violations} == {"unregister-not-a-live-base"}
    assert len(result.violations) == 3      # 3 chunks, released by teardown #1, again by #2
    assert all("already released" in v.message for v in result.violations)


POOL_FOLDERS = ("deepseek_v4", "dsa", "mamba", "mha", "mla")
ROLLBACK_THEN_TEARDOWN = "unregister_faults/rollback-unregister-fails-then-teardown-twice"


def test_stale_rollback_list_is_caught_only_by_the_combined_scenario(catalog,
                                                                     load_impl) -> None:
    """Each pool folder has the scenario that combines a rollback unregister fault with two
    teardowns after the failed register, and only it catches the stale chunk list: an
    unregister fault alone, or a teardown after a clean rollback, does not."""
    impl = load_impl("stale_rollback_list", "sglang")
    unregister_faults = [s for s in catalog if s.target == "cuda" and any(
        "Unregister" in str(f.get("point", "")) for f in s.faults)]
    after_failure = [s for s in catalog if "teardown-after-failure" in s.exercise]
    chosen = {s.id: s for s in unregister_faults + after_failure}
    failed = {sid for sid, s in chosen.items() if run_scenario(s, impl).verdict != "pass"}
    assert failed == {f"{pool}/{ROLLBACK_THEN_TEARDOWN}" for pool in POOL_FOLDERS}
    for pool in POOL_FOLDERS:
        sc = chosen[f"{pool}/{ROLLBACK_THEN_TEARDOWN}"]
        assert sc.exercise.count("teardown-after-failure") == 2 and sc.expect == \
            "register-error"
