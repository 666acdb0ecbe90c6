"""The Mooncake target's rules at edges the catalog's scenarios never reach
(harness/mooncake/checks.py), on run records built as the fake store's trace shows them.

Each test is a behaviour a surviving mutant changed (docs/mutation-testing.md): the verdict
and the sentence. The store's codes are the real ones: register_buffer and unregister_buffer
return 0 or -600 INVALID_PARAMS (docs/mooncake-verbs.md §1.4, §1.5 step 5).
"""

from __future__ import annotations

from typing import Any

from kvreg.fakes.recorder import TraceEntry
from kvreg.harness.mooncake.checks import (
    McBuffer,
    McRecord,
    buffer_ends,
    check_mooncake_run,
    mooncake_warnings,
)
from kvreg.harness.mooncake.transfers import PoolBuffer
from kvreg.harness.pools.registry import make_geometry
from kvreg.harness.run.endstate import summarize_exception

GEO = make_geometry("mla", layout="page_first_direct", layer_num=2, kv_lora_rank=4,
                    qk_rope_head_dim=4, dtype="bfloat16", page_size=2, page_num=4)
SPEC = GEO.buffers()[0]          # kv_buffer, 256 bytes, objects of 64
N = SPEC.nbytes
BASE = 0x7F0000000000
NODE = "node0"
INVALID = -600
TEARDOWN = ("register", "teardown")


def reg(seq: int, ptr: int, size: int, code: int = 0, injected: bool = False) -> TraceEntry:
    return TraceEntry(seq, f"mooncake:{NODE}", "register_buffer", (ptr, size), code, code,
                      injected, 0)


def unreg(seq: int, ptr: int, code: int = 0, injected: bool = False) -> TraceEntry:
    return TraceEntry(seq, f"mooncake:{NODE}", "unregister_buffer", (ptr,), code, code,
                      injected, 0)


def buf(base: int = BASE, label: str = "kv_buffer", *, error: BaseException | None = None,
        registered: bool | None = None, seq_start: int = 0, seq_end: int = 50,
        live_after_error: list[tuple[int, int]] | None = None) -> McBuffer:
    done = error is None if registered is None else registered
    return McBuffer(PoolBuffer(NODE, 0, SPEC, base, None, label), 64, error, None, done,
                    seq_start, seq_end, live_after_error or [],
                    summarize_exception(error) if error is not None else None)


def record(trace: list[TraceEntry], buffers: list[McBuffer] | None = None, *,
           expect: str = "success", **kw: Any) -> McRecord:
    return McRecord(128, expect, True, buffers or [buf()], trace, **kw)


def rules(r: McRecord) -> list[str]:
    return [v.rule for v in check_mooncake_run(r)]


OK_RUN = [reg(1, BASE, 128), reg(2, BASE + 128, 128), unreg(60, BASE), unreg(61, BASE + 128)]
BOOM = RuntimeError("unregister_buffer returned -600")


# -- teardown-raised ---------------------------------------------------------------------------

def test_a_fault_injected_into_the_first_teardown_call_excuses_the_raise() -> None:
    trace = [reg(1, BASE, 128), reg(2, BASE + 128, 128),
             unreg(60, BASE, code=INVALID, injected=True), unreg(61, BASE + 128)]
    b = buf()
    r = record(trace, [b], teardown_start=60, teardown_errors=[(0, b, BOOM)],
               exercised=TEARDOWN, live_end=[(NODE, BASE, 128)])
    assert "teardown-raised" not in rules(r), check_mooncake_run(r)


def test_an_injected_fault_before_teardown_does_not_excuse_a_raising_teardown() -> None:
    trace = [reg(1, BASE, 128), reg(2, BASE + 128, 128),
             unreg(3, BASE + 128, code=INVALID, injected=True), *OK_RUN[2:]]
    b = buf()
    r = record(trace, [b], teardown_start=60, teardown_errors=[(0, b, BOOM)],
               exercised=TEARDOWN)
    assert rules(r) == ["teardown-raised"]
    assert check_mooncake_run(r)[0].message == ("teardown #1 of kv_buffer raised "
                                                "RuntimeError: unregister_buffer returned -600")


# -- unregister-not-a-live-base ----------------------------------------------------------------

def test_unregisters_after_an_injected_failure_are_still_judged() -> None:
    trace = [reg(1, BASE, 128), reg(2, BASE + 128, 128),
             unreg(60, BASE, code=INVALID, injected=True), unreg(61, BASE + 128),
             unreg(62, BASE + 128, code=INVALID), unreg(63, BASE + 64, code=INVALID),
             unreg(64, BASE + 200, code=INVALID)]
    vs = [v for v in check_mooncake_run(record(trace, teardown_start=60))
          if v.rule == "unregister-not-a-live-base"]
    assert [v.message for v in vs] == [
        "call #63 unregister_buffer(kv_buffer+0x80), which was already released, "
        "returned -600 INVALID_PARAMS",
        "call #64 unregister_buffer(kv_buffer+0x40), which is inside an MR, not its base, "
        "returned -600 INVALID_PARAMS",
        "call #65 unregister_buffer(kv_buffer+0xc8), which was never registered, "
        "returned -600 INVALID_PARAMS"]


# -- optional pinning, live lists, the call budget ---------------------------------------------

def test_an_optional_pinning_that_fell_back_to_pageable_memory_passes() -> None:
    # register_buffer failed, register() returned normally and left nothing registered: the
    # pageable fallback pinning = "optional" allows (no error-swallowed, no registered)
    trace = [reg(1, BASE, 128, code=INVALID)]
    assert rules(record(trace, pinning="optional")) == []
    # the same run with pinning required swallowed the error
    assert rules(record(trace)) == ["error-swallowed"]


def test_an_optional_pinning_that_kept_part_of_the_pool_swallowed_the_error() -> None:
    trace = [reg(1, BASE, 128), reg(2, BASE + 128, 128, code=INVALID)]
    assert rules(record(trace, pinning="optional")) == ["error-swallowed"]


def test_an_mr_that_starts_at_the_buffers_end_is_the_next_buffers() -> None:
    first, second = buf(BASE, "kv_a", seq_end=10), buf(BASE + N, "kv_b", seq_start=10)
    trace = [reg(1, BASE, 128, code=INVALID), reg(2, BASE, 128), reg(3, BASE + 128, 128),
             reg(11, BASE + N, N)]
    r = record(trace, [first, second])
    ends = buffer_ends(r)
    assert ends[0].live == [(BASE, 128), (BASE + 128, 128)]
    assert ends[1].live == [(BASE + N, N)]
    (warning,) = mooncake_warnings(r)
    assert "kv_a ended fully registered in 2 MR(s) on aligned seams" in warning.message


def test_a_run_stopped_by_the_call_budget_is_not_judged_unregistered() -> None:
    # the budget stopped register mid-way: it never returned, so "registered none" would
    # blame the code for kvreg's own stop
    stopped = buf(registered=False)
    r = record([reg(1, BASE, 128)], [stopped], budget_hit=500)
    assert rules(r) == ["call-budget"]
    assert check_mooncake_run(r)[0].message.startswith("stopped after 500 store calls")
    # a register that returned having registered nothing is
    returned = record([], [buf()])
    assert rules(returned) == ["registered"]
    assert "registered none of its 256 bytes" in check_mooncake_run(returned)[0].message


# -- messages ----------------------------------------------------------------------------------

def test_every_rule_names_the_call_one_based() -> None:
    zero = check_mooncake_run(record([reg(4, BASE, 0)]))
    assert zero[0].message.startswith("call #5 register_buffer(kv_buffer+0x0, 0) registers 0")
    outside = check_mooncake_run(record([reg(6, BASE + 200, 128)]))
    assert outside[0].message.startswith("call #7 register_buffer(kv_buffer+0xc8, 128) is not")
    # refused (-600) and where register() stopped: an over-limit call judged by its result
    over = [v for v in check_mooncake_run(record([reg(8, BASE, 256, code=INVALID)]))
            if v.rule == "mr-over-limit"]
    assert over[0].message.startswith("call #9 register_buffer(kv_buffer+0x0, 256) asks for "
                                      "one MR of 256 bytes")


def test_a_swallowed_error_names_its_first_failed_call_with_that_calls_code() -> None:
    trace = [reg(1, BASE, 128), reg(2, BASE + 128, 128, code=INVALID),
             reg(3, BASE + 128, 128, code=-1)]
    vs = check_mooncake_run(record(trace))
    assert vs[0].rule == "error-swallowed" and vs[0].seq == 2
    assert vs[0].message.startswith("register_buffer(kv_buffer+0x80, 128) (call #3) returned "
                                    "-600 INVALID_PARAMS but register() of kv_buffer returned "
                                    "normally")


def test_an_unexpected_error_names_the_failed_call() -> None:
    trace = [reg(1, BASE, 128), reg(2, BASE + 128, 128, code=INVALID, injected=True)]
    b = buf(error=RuntimeError("register failed: -600"), seq_end=3)
    msg = [v.message for v in check_mooncake_run(record(trace, [b]))
           if v.rule == "unexpected-error"]
    assert msg == ["register() of kv_buffer raised RuntimeError: register failed: -600; "
                   "register_buffer(kv_buffer+0x80, 128) (call #3) returned -600 "
                   "INVALID_PARAMS [injected]"]


def test_rollback_messages_say_none_or_part_with_the_failed_call() -> None:
    err = RuntimeError("register failed: -600")
    trace = [reg(1, BASE, 64), reg(2, BASE + 64, 64), reg(3, BASE + 128, 128, code=INVALID)]
    # the buffer's calls start at its seq_start: the first one is its own
    none = buf(error=err, seq_start=1, seq_end=4, live_after_error=[(BASE, 64), (BASE + 64, 64)])
    vs = [v.message for v in check_mooncake_run(record(trace, [none], expect="register-error"))
          if v.rule == "not-rolled-back"]
    assert vs[0] == ("MR [kv_buffer+0x0, +64) is still registered after register() of "
                     "kv_buffer failed (register_buffer call #4 returned -600 INVALID_PARAMS): "
                     "no rollback (none of its 2 earlier MR(s) was released; still registered: "
                     "[kv_buffer+0x0, +64), [kv_buffer+0x40, +64))")
    # a retry refused by a dummy client (-1, §7) after the first failure: the first is named
    part = buf(error=err, seq_end=6, live_after_error=[(BASE, 64)])
    retried = [*trace, reg(4, BASE + 128, 128, code=-1), unreg(5, BASE + 64)]
    vs = [v.message for v in check_mooncake_run(record(retried, [part],
                                                       expect="register-error"))
          if v.rule == "not-rolled-back"]
    assert vs == ["MR [kv_buffer+0x0, +64) is still registered after register() of kv_buffer "
                  "failed (register_buffer call #4 returned -600 INVALID_PARAMS): partial "
                  "rollback (released 1 of 2 earlier MR(s); still registered: "
                  "[kv_buffer+0x0, +64))"]


def test_leaks_come_after_every_other_rule_and_in_address_order() -> None:
    trace = [reg(1, BASE, 64), reg(2, BASE + 64, 64), reg(3, BASE + 128, 128)]
    b = buf()
    r = record(trace, [b], teardown_start=60, exercised=TEARDOWN,
               live_end=[(NODE, BASE, 64), (NODE, BASE + 64, 64), (NODE, BASE + 128, 128)],
               teardown_errors=[(0, b, BOOM)])
    assert rules(r) == ["leak", "leak", "leak", "teardown-raised"]
    assert [v.message.split(")")[0] for v in check_mooncake_run(r)][:3] == [
        "MR [kv_buffer+0x0, +64", "MR [kv_buffer+0x40, +64", "MR [kv_buffer+0x80, +128"]


def test_an_mr_a_rollback_fault_pinned_is_not_held_against_the_rollback() -> None:
    # chunk 2 failed; the rollback of chunk 1 got an injected -600 (seq 4, inside register),
    # so only the MR nothing tried to release is not rolled back; a teardown unregister at
    # the buffer's seq_end is no rollback
    err = RuntimeError("register failed: -600")
    trace = [reg(1, BASE, 64), reg(2, BASE + 64, 64), reg(3, BASE + 128, 128, code=INVALID),
             unreg(4, BASE, code=INVALID, injected=True),
             unreg(5, BASE + 64, code=INVALID, injected=True)]
    b = buf(error=err, seq_start=1, seq_end=5, live_after_error=[(BASE, 64), (BASE + 64, 64)])
    vs = [v.message for v in check_mooncake_run(record(trace, [b], expect="register-error"))
          if v.rule == "not-rolled-back"]
    assert len(vs) == 1 and vs[0].startswith("MR [kv_buffer+0x40, +64) is still registered")
    assert vs[0].endswith("still registered: [kv_buffer+0x40, +64))")


def test_rejected_too_late_counts_only_the_buffers_own_calls() -> None:
    err = ValueError("object stride 512 > MR limit 128")
    late = buf(error=err, seq_start=5, seq_end=9)
    assert rules(record([reg(5, BASE, 128)], [late], expect="rejected")) == \
        ["rejected-too-late"]
    assert rules(record([reg(9, BASE, 128)], [late], expect="rejected")) == []


def test_a_failed_buffers_mrs_do_not_stop_the_leak_check_of_the_others() -> None:
    err = RuntimeError("register failed: -600")
    failed = buf(BASE, "kv_a", error=err, seq_end=3, live_after_error=[(BASE, 64)])
    other = buf(BASE + N, "kv_b", seq_start=3)
    trace = [reg(1, BASE, 64), reg(2, BASE + 64, 64, code=INVALID), reg(3, BASE + N, N)]
    r = record(trace, [failed, other], expect="register-error", teardown_start=60,
               exercised=TEARDOWN, live_end=[(NODE, BASE, 64), (NODE, BASE + N, N)])
    leaks = [v.message for v in check_mooncake_run(r) if v.rule == "leak"]
    assert leaks == ["MR [kv_b+0x0, +256) was never released by teardown"]


def test_an_over_limit_call_outside_register_is_its_own_fault() -> None:
    # released Mooncake refuses a register_buffer above the MR limit with -600 (§1.6): inside
    # register() a fallback may follow it; before or after the register() window nothing can
    over = "above the effective MR limit 128"
    for seq in (2, 60):                       # the buffer's register() spans calls 5..49
        vs = [v.message for v in check_mooncake_run(
            record([reg(seq, BASE, 256, code=INVALID)], [buf(seq_start=5)]))
            if v.rule == "mr-over-limit"]
        assert len(vs) == 1 and over in vs[0], (seq, vs)
        assert vs[0].endswith("; it was made outside register()"), (seq, vs)


def test_a_recovered_failure_is_named_at_its_own_address() -> None:
    # the warning names the failed call by the buffer offset it asked for (its pointer), not
    # by its size
    trace = [reg(1, BASE, 128), reg(2, BASE + 128, 128, code=INVALID), reg(3, BASE + 128, 128)]
    ws = [v.message for v in mooncake_warnings(record(trace))]
    assert len(ws) == 1 and ws[0].startswith(
        "register_buffer(kv_buffer+0x80, 128) (call #3) returned -600 INVALID_PARAMS; "
        "register() recovered: kv_buffer ended fully registered in 2 MR(s)"), ws


def test_the_whole_buffer_refused_then_chunks_that_cover_it_pass() -> None:
    # released Mooncake refuses the whole 256-byte buffer above the 128-byte limit with -600
    # and registers nothing (§1.6); register() falling back to two 128-byte chunks that cover
    # the buffer is correct: no rule fails it, and the refusal is a recovered failure
    trace = [reg(1, BASE, 256, code=INVALID), reg(2, BASE, 128), reg(3, BASE + 128, 128)]
    r = record(trace)
    assert check_mooncake_run(r) == []
    assert [v.rule for v in mooncake_warnings(r)] == ["recovered"]
    # the same refusal with the chunks left out is register()'s fault
    short = record(trace[:2])
    assert "mr-over-limit" in rules(short)


def test_a_call_at_the_buffers_seq_end_is_no_rollback() -> None:
    # register() of the buffer spans calls 1..3; the unregister at call 4 (its seq_end) came
    # after register() raised: it is not part of the buffer's rollback
    err = RuntimeError("register failed: -600")
    trace = [reg(1, BASE, 64), reg(2, BASE + 64, 64), reg(3, BASE + 128, 128, code=INVALID),
             unreg(4, BASE + 64)]
    b = buf(error=err, seq_start=1, seq_end=4, live_after_error=[(BASE, 64), (BASE + 64, 64)])
    vs = [v.message for v in check_mooncake_run(record(trace, [b], expect="register-error"))
          if v.rule == "not-rolled-back"]
    assert vs and all("no rollback (none of its 2 earlier MR(s) was released" in m for m in vs)


def test_the_over_limit_message_says_the_store_refused_only_for_its_own_refusal() -> None:
    # -600 INVALID_PARAMS from the store itself is released Mooncake's size check (§1.6);
    # the same code from a fault plan says nothing about the store
    tail = ": released Mooncake rejects it with -600 INVALID_PARAMS and registers nothing (§1.6)"

    def message(injected: bool) -> str:
        r = record([reg(8, BASE, 256, code=INVALID, injected=injected)])
        return str(next(v.message for v in check_mooncake_run(r)
                        if v.rule == "mr-over-limit"))

    assert tail in message(False)
    assert tail not in message(True)


def test_a_run_stopped_by_the_call_budget_reports_that_first() -> None:
    # the budget stops the run, so nothing after it was seen: its verdict comes before every
    # other, even one on the run's first call
    r = record([reg(0, BASE, 0)], budget_hit=5)
    assert rules(r)[:2] == ["call-budget", "register-size-zero"]


def test_a_pool_that_should_have_been_rejected_is_judged_after_its_last_buffer() -> None:
    # expect "rejected": register() accepted every buffer; the verdict sits after the last
    # buffer's register() (where it should have raised at the latest)
    first = buf(BASE, "kv_a", seq_start=0, seq_end=3)
    last = buf(BASE + N, "kv_b", seq_start=3, seq_end=9)
    trace = [reg(1, BASE, 128), reg(2, BASE + 128, 128), reg(4, BASE + N, 128),
             reg(5, BASE + N + 128, 128)]
    vs = [v for v in check_mooncake_run(record(trace, [first, last], expect="rejected"))
          if v.rule == "not-rejected"]
    assert [(v.seq, v.message.split(":")[0]) for v in vs] == [
        (9, "register() accepted every buffer with MR limit 128")]


def test_a_seam_off_the_object_stride_is_judged() -> None:
    # objects of 64 bytes: an MR seam at 96 cuts one, which released Mooncake cannot
    # transfer in one slice (§1.7); a seam at 128 cuts none
    cut = rules(record([reg(1, BASE, 96), reg(2, BASE + 96, 160)]))
    assert cut == ["seams-aligned"], cut
    assert rules(record([reg(1, BASE, 128), reg(2, BASE + 128, 128)])) == []


def test_an_expected_register_error_with_no_failed_call_is_unexpected() -> None:
    # the scenario expects register() to raise for a failed store call; raising when every
    # call succeeded is an error of its own
    b = buf(error=RuntimeError("no reason"), seq_start=1, seq_end=3)
    ok = [reg(1, BASE, 128), reg(2, BASE + 128, 128)]
    assert "unexpected-error" in rules(record(ok, [b], expect="register-error"))
    failed = [reg(1, BASE, 128), reg(2, BASE + 128, 128, code=INVALID)]
    assert "unexpected-error" not in rules(record(failed, [b], expect="register-error"))
