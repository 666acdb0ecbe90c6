"""``check_run`` on hand-built run records: each rule's edge, without running a scenario.

The catalog tests judge whole runs (slow, and many rules fire together); these pin the
rules' boundaries one at a time, so that a changed comparison or a dropped branch in
``harness/cuda/checks.py`` fails here (mutation testing, docs/mutation-testing.md).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from kvreg.fakes.recorder import TraceEntry
from kvreg.harness.cuda.checks import BufferRun, RunRecord, check_run, check_warnings
from kvreg.harness.pools.registry import make_geometry
from kvreg.harness.run.endstate import Pending, summarize_exception

GEO = make_geometry("mla", layout="page_first_direct", layer_num=2, kv_lora_rank=4,
                    qk_rope_head_dim=4, dtype="bfloat16", page_size=2, page_num=4)
SPEC = GEO.buffers()[0]          # kv_buffer, 256 bytes, granularity 64
N = SPEC.nbytes
BASE = 0x7F0000000000


def reg(seq: int, ptr: int, size: int, code: int = 0, injected: bool = False,
        api: str = "cudaHostRegister") -> TraceEntry:
    return TraceEntry(seq, "torch", api, (ptr, size, 0), code, code, injected, 0)


def unreg(seq: int, ptr: int, code: int = 0, injected: bool = False,
          api: str = "cudaHostUnregister") -> TraceEntry:
    return TraceEntry(seq, "torch", api, (ptr,), code, code, injected, 0)


def record(trace: list[TraceEntry], *, expect: str = "success",
           error: BaseException | None = None, seq_end: int = 50,
           granularity: int | None = 64, limit: int = 128, seq_start: int = 0,
           registered: bool | None = None, **kw: Any) -> RunRecord:
    done = error is None if registered is None else registered
    b = BufferRun(0, SPEC, BASE, granularity, error, None, done, seq_start, seq_end,
                  summarize_exception(error) if error is not None else None, 64)
    return RunRecord(GEO, limit, expect, None, [b], trace, **kw)


def rules(r: RunRecord) -> list[str]:
    return [v.rule for v in check_run(r)]


def _ok_run(**kw: Any) -> list[TraceEntry]:
    return [reg(1, BASE, 128), reg(2, BASE + 128, 128), unreg(60, BASE), unreg(61, BASE + 128)]


def test_a_correct_run_has_no_violation() -> None:
    r = record(_ok_run(), teardown_start=60, exercised=("register", "teardown"))
    assert check_run(r) == [] and check_warnings(r) == []


def test_failed_register_calls_are_never_judged_as_unregisters() -> None:
    # a register that fails with 1 or 713 is not an unregister of a dead base: only the
    # error rules speak about it (§8 of the issue that pinned this)
    for code in (1, 713):
        err = RuntimeError(f"cudaHostRegister failed with {code}")
        r = record([reg(1, BASE, 128), reg(2, BASE + 128, 128, code=code), unreg(3, BASE)],
                   expect="register-error", error=err, seq_end=4)
        assert "unregister-not-a-live-base" not in rules(r), check_run(r)
        assert rules(r) == []


def test_unregister_of_a_dead_base_says_why() -> None:
    trace = [reg(1, BASE, 128), reg(2, BASE + 128, 128), unreg(60, BASE), unreg(61, BASE + 128),
             unreg(62, BASE, code=713), unreg(63, BASE + 64, code=1),
             unreg(64, BASE + 192, code=713), unreg(65, BASE + 64, code=713, injected=True),
             unreg(66, BASE + 128, code=2)]
    vs = [v for v in check_run(record(trace, teardown_start=60,
                                      exercised=("register", "teardown")))
          if v.rule == "unregister-not-a-live-base"]
    assert [v.seq for v in vs] == [62, 63, 64]
    assert "was already released (713 cudaErrorHostMemoryNotRegistered)" in vs[0].message
    assert "is inside a registration, not its base (1 cudaErrorInvalidValue)" in vs[1].message
    assert "kv_buffer+0xc0, which was never registered" in vs[2].message
    assert vs[0].message.startswith("call #63 unregisters kv_buffer+0x0")   # seq 62: 1-based


def test_driver_twins_count_as_registrations() -> None:
    trace = [reg(1, BASE, 128, api="cuMemHostRegister"),
             reg(2, BASE + 128, 128, api="cuMemHostRegister"),
             unreg(60, BASE, api="cuMemHostUnregister"),
             unreg(61, BASE + 128, api="cuMemHostUnregister"),
             unreg(62, BASE + 128, code=713, api="cuMemHostUnregister")]
    assert rules(record(trace, teardown_start=60)) == ["unregister-not-a-live-base"]


def test_call_budget_comes_first_then_the_rest_by_call() -> None:
    trace = [reg(3, BASE, 0), reg(5, BASE + 256, 64), reg(7, BASE, 192)]
    r = record(trace, budget_hit=500, live_end=[(BASE, 192)],
               exercised=("register", "teardown"), teardown_start=40, limit=128)
    vs = check_run(r)
    # the call budget first, then by call; the end-state rules after the calls, leaks last
    assert [v.rule for v in vs] == ["call-budget", "register-size-zero",
                                    "range-outside-buffer", "chunk-over-limit", "registered",
                                    "leak"]
    assert [v.seq for v in vs][:4] == [0, 3, 5, 7]
    assert vs[0].message.startswith("stopped after 500 runtime calls")
    assert "registers 0 bytes at kv_buffer+0x0" in vs[1].message
    assert "[kv_buffer+0x100 (the end of kv_buffer), +64)" in vs[2].message


def test_no_budget_violation_without_the_budget() -> None:
    assert "call-budget" not in rules(record(_ok_run(), budget_hit=None, teardown_start=60))


def test_chunk_limit_is_inclusive_and_only_for_chunked_pools() -> None:
    at = [reg(1, BASE, 128), reg(2, BASE + 128, 128)]
    assert rules(record(at, limit=128)) == []
    assert rules(record([reg(1, BASE, N)], limit=128, granularity=None)) == []  # one call
    over = [reg(1, BASE, 129), reg(2, BASE + 129, 127)]
    got = check_run(record(over, limit=128))
    assert [v.rule for v in got][:1] == ["chunk-over-limit"]
    assert "registers 129 bytes at kv_buffer+0x0, above the chunk limit 128" in got[0].message


def test_range_must_lie_inside_one_buffer() -> None:
    inside = [reg(1, BASE, N)]
    assert "range-outside-buffer" not in rules(record(inside, limit=N))
    past = [reg(1, BASE + 1, N)]
    assert "range-outside-buffer" in rules(record(past, limit=N + 1))
    before = [reg(1, BASE - 1, 2)]
    assert "range-outside-buffer" in rules(record(before, limit=N))
    far = check_run(record([reg(1, BASE + (1 << 30), 64)]))
    assert "(outside every pool buffer)" in far[0].message


def test_error_swallowed_needs_a_failed_call_and_a_normal_return() -> None:
    trace = [reg(1, BASE, 128), reg(2, BASE + 128, 128, code=2)]
    r = record(trace, logs=["", "register failed, continuing"], live_end=[(BASE, 128)])
    vs = check_run(r)
    assert vs[0].rule == "error-swallowed" and vs[0].seq == 2
    assert "cudaHostRegister returned 2 (out of memory) at kv_buffer+0x80 (call #3)" in \
        vs[0].message
    assert "(it only logged: 'register failed, continuing')" in vs[0].message
    assert "registered" not in [v.rule for v in vs]       # one rule explains it
    # raised instead: not swallowed; recovered (fully registered): a warning, not a failure
    raised = record(trace, expect="register-error", error=RuntimeError("failed: 2"))
    assert "error-swallowed" not in rules(raised)
    recovered = record([reg(1, BASE, 128), reg(2, BASE + 128, 128, code=2),
                        reg(3, BASE + 128, 128)])
    assert rules(recovered) == []
    assert [w.rule for w in check_warnings(recovered)] == ["recovered"]


def test_unexpected_error_names_the_failing_call() -> None:
    trace = [reg(1, BASE, 128, code=2)]
    vs = check_run(record(trace, error=MemoryError("no pinned memory")))
    assert vs[0].rule == "unexpected-error" and vs[0].seq == 50
    assert vs[0].message == ("register() of kv_buffer raised MemoryError: no pinned memory; "
                             "cudaHostRegister(kv_buffer+0x0, 128) returned 2 (out of memory)")
    assert "unexpected-error" in rules(record([], error=ValueError()))
    assert check_run(record([], error=ValueError()))[0].message == \
        "register() of kv_buffer raised ValueError"


def test_register_error_expected_but_the_fault_never_fired() -> None:
    # fewer calls than the scenario assumed: success is expected instead
    assert "unexpected-error" in rules(record([reg(1, BASE, 128)], expect="register-error",
                                              error=RuntimeError("x")))
    fired = record([reg(1, BASE, 128, code=2)], expect="register-error",
                   error=RuntimeError("failed with 2"))
    assert "unexpected-error" not in rules(fired)
    stopped = record([reg(1, BASE, 128)], expect="register-error", error=RuntimeError("x"),
                     budget_hit=9)
    assert "unexpected-error" not in rules(stopped)


def test_rejection_rules() -> None:
    nothing = record([], expect="rejected", granularity=256, limit=128)
    vs = check_run(nothing)
    assert [v.rule for v in vs][:1] == ["not-rejected"]
    assert "accepted granularity 256 of kv_buffer with chunk limit 128" in vs[0].message
    fine = record([], expect="rejected", granularity=64, limit=128)
    assert "register() accepted every buffer" in check_run(fine)[0].message
    late = record([reg(3, BASE, 128)], expect="rejected", error=ValueError("too big"),
                  granularity=256)
    vs = check_run(late)
    assert vs[0].rule == "rejected-too-late" and vs[0].seq == 3
    assert "made 1 cudaHostRegister call(s) before rejecting granularity 256 > limit 128" in \
        vs[0].message
    wrong = record([], expect="rejected", error=RuntimeError("too big"), granularity=256)
    assert rules(wrong) == ["rejected-wrong-error"]
    assert "rejected the granularity with RuntimeError: too big; expected ValueError" in \
        check_run(wrong)[0].message
    assert rules(record([], expect="rejected", error=ValueError("x"), granularity=256)) == []


def test_leftovers_after_a_failed_register_are_not_rolled_back() -> None:
    trace = [reg(1, BASE, 128), reg(2, BASE + 128, 128, code=2)]
    r = record(trace, expect="register-error", error=RuntimeError("failed: 2"),
               live_end=[(BASE, 128)])
    vs = check_run(r)
    assert [v.rule for v in vs] == ["not-rolled-back"]
    assert vs[0].message.startswith("chunk [kv_buffer+0x0, +128) is still registered after "
                                    "register() of kv_buffer failed: no rollback")
    # what an injected unregister failure pinned during rollback is not held against it
    pinned = record([*trace, unreg(3, BASE, code=1, injected=True)], expect="register-error",
                    error=RuntimeError("failed: 2"), live_end=[(BASE, 128)])
    assert rules(pinned) == []


def test_leak_only_when_teardown_ran_and_names_a_lost_chunk() -> None:
    trace = [reg(1, BASE, 128), reg(2, BASE + 128, 128), unreg(60, BASE)]
    plain = record(trace, live_end=[(BASE + 128, 128)], teardown_start=60,
                   exercised=("register", "teardown"))
    vs = check_run(plain)
    assert [v.rule for v in vs] == ["leak"]
    assert vs[0].message == "chunk [kv_buffer+0x80, +128) was never released by teardown"
    no_teardown = record(trace, live_end=[(BASE + 128, 128)], teardown_start=60,
                         exercised=("register",))
    assert rules(no_teardown) == []
    lost = record([*trace, unreg(61, BASE + 128, code=2, injected=True)],
                  live_end=[(BASE + 128, 128)], teardown_start=60,
                  exercised=("register", "teardown"))
    assert "teardown lost track of it after cudaHostUnregister failed" in \
        check_run(lost)[0].message


def test_teardown_raised_unless_a_fault_was_injected_into_teardown() -> None:
    trace = _ok_run()
    boom = (0, 0, RuntimeError("boom\nsecond line"))
    vs = check_run(record(trace, teardown_start=60, teardown_errors=[boom]))
    assert [v.rule for v in vs] == ["teardown-raised"]
    assert vs[0].message == "teardown #1 of kv_buffer raised RuntimeError: boom second line"
    injected = [*trace, unreg(62, BASE, code=2, injected=True)]
    assert rules(record(injected, teardown_start=60, teardown_errors=[boom])) == []
    # an injected unregister before teardown does not excuse a teardown that raised
    early = [unreg(0, BASE + 64, code=2, injected=True), *trace]
    assert rules(record(early, teardown_start=60, teardown_errors=[boom])) == ["teardown-raised"]


def test_transfer_failure_is_reported_after_the_register_rules() -> None:
    class T:
        ok, code, failed_row, detail = False, 1, None, "row 3"

    vs = check_run(record(_ok_run(), transfer=T(), teardown_start=60))
    assert [v.rule for v in vs] == ["transfer-failed"]
    assert vs[0].message == "batch copy of every page failed with 1 (invalid argument): row 3"

    class Fine:
        ok = True

    assert rules(record(_ok_run(), transfer=Fine(), teardown_start=60)) == []


def test_pending_errors_fail_in_cuda_bindings_and_warn_in_torch() -> None:
    # docs/cuda-runtime.md §6: torch's binding cannot drain its last error; cuda-python's can
    bindings = [Pending("register", "cuda-bindings", 2, "cudaErrorMemoryAllocation")]
    r = record(_ok_run(), pending=bindings, teardown_start=60)
    assert rules(r) == ["error-pending"] and check_warnings(r) == []
    torch = [Pending("register", "torch", 2, "cudaErrorMemoryAllocation")] * 2
    r = record(_ok_run(), pending=torch, teardown_start=60)
    assert rules(r) == []
    assert [w.rule for w in check_warnings(r)] == ["error-pending"]      # once, not twice
    cleared = [Pending("teardown", "cuda-bindings", 0, "cudaSuccess")]
    assert rules(record(_ok_run(), pending=cleared, teardown_start=60)) == []


def test_transfer_failure_names_the_page_and_the_seam_inside_it() -> None:
    # page 2 is [128, 192); registrations start at 128 (the page's own start: no seam inside)
    # and at 160 (inside it): the message names 160
    trace = [reg(1, BASE, 128), reg(2, BASE + 128, 32), reg(3, BASE + 160, 96),
             unreg(60, BASE), unreg(61, BASE + 128), unreg(62, BASE + 160)]

    class T:
        ok, code, failed_row, detail = False, 1, 2, ""

    vs = check_run(record(trace, transfer=T(), teardown_start=60, limit=256))
    msgs = [v.message for v in vs if v.rule == "transfer-failed"]
    assert len(msgs) == 1
    assert msgs[0].startswith("page 2 of kv_buffer [128, 192) spans registrations at offset "
                              "160: cudaMemcpyBatchAsync returns 1 (invalid argument)")
    assert "copy_across_registrations" in msgs[0]   # the [UNC] option that decides it


def test_transfer_failure_sorts_after_the_calls_and_before_leaks() -> None:
    class T:
        ok, code, failed_row, detail = False, 1, None, ""

    trace = [reg(3, BASE, 0), reg(4, BASE, 256)]
    vs = check_run(record(trace, transfer=T(), live_end=[(BASE, 256)], teardown_start=60,
                          exercised=("register", "teardown"), limit=256))
    assert [v.rule for v in vs] == ["register-size-zero", "transfer-failed", "leak"]


def test_calls_at_the_buffers_own_seq_bounds() -> None:
    # a buffer owns the calls in [seq_start, seq_end): the first call is its own, a call at
    # seq_end is the next buffer's
    late = record([reg(5, BASE, 128)], expect="rejected", error=ValueError("too big"),
                  granularity=256, seq_start=5, seq_end=9)
    assert rules(late) == ["rejected-too-late"]
    after = record([reg(9, BASE, 128)], expect="rejected", error=ValueError("too big"),
                   granularity=256, seq_start=5, seq_end=9)
    assert "rejected-too-late" not in rules(after)
    failed_first = record([reg(5, BASE, 128, code=2)], error=RuntimeError("no"), seq_start=5,
                          seq_end=9)
    assert "returned 2 (out of memory)" in check_run(failed_first)[0].message


def test_a_register_that_never_returned_is_not_judged_registered() -> None:
    # registered False (it never returned: stopped, hung) with no exception: the registered
    # rule does not judge it
    r = record([], registered=False)
    assert "registered" not in rules(r)
    assert "registered" in rules(record([], registered=True))


def test_error_swallowed_names_the_first_failed_call_not_tried_again() -> None:
    trace = [reg(1, BASE, 128, code=2), reg(2, BASE + 128, 128, code=1)]
    (v,) = [v for v in check_run(record(trace)) if v.rule == "error-swallowed"]
    assert "(call #2)" in v.message and v.seq == 1


def test_not_rejected_without_buffers_is_at_seq_0() -> None:
    r = RunRecord(GEO, 128, "rejected", None, [], [])
    (v,) = check_run(r)
    assert (v.rule, v.seq) == ("not-rejected", 0)
    assert "accepted every buffer" in v.message


def test_error_reported_names_the_failed_calls_offset_and_size() -> None:
    trace = [reg(1, BASE, 128), reg(2, BASE + 128, 96, code=2), unreg(3, BASE)]
    vs = check_run(record(trace, expect="register-error", error=RuntimeError("setup failed"),
                          seq_end=4))
    assert [v.rule for v in vs] == ["error-reported"]
    assert "returned by cudaHostRegister(kv_buffer+0x80, 96) (call #3)" in vs[0].message
    assert "cudaErrorMemoryAllocation (2, out of memory)" in vs[0].message


SPEC2 = dataclasses.replace(SPEC, name="kv_buffer_2")
BASE2 = BASE + 0x100000


def two_buffers(trace: list[TraceEntry], first: dict[str, Any], second: dict[str, Any],
                **kw: Any) -> RunRecord:
    def run(i: int, spec: Any, base: int, o: dict[str, Any]) -> BufferRun:
        err = o.get("error")
        return BufferRun(i, spec, base, 64, err, None, o.get("registered", err is None),
                         o.get("seq_start", 0), o.get("seq_end", 0),
                         summarize_exception(err) if err is not None else None, 64)

    return RunRecord(GEO, 128, kw.pop("expect", "success"), None,
                     [run(0, SPEC, BASE, first), run(1, SPEC2, BASE2, second)], trace, **kw)


def test_a_buffer_whose_register_never_ran_owns_no_call() -> None:
    # the second buffer keeps BufferRun's default seq bounds: the failed call at seq 0 is the
    # first buffer's (which raised), so nothing is swallowed by the second
    trace = [reg(0, BASE, 128, code=2)]
    r = two_buffers(trace, {"error": RuntimeError("failed with 2"), "seq_end": 5},
                    {"registered": False}, expect="register-error")
    assert "error-swallowed" not in rules(r)
    assert BufferRun(1, SPEC2, BASE2, 64).seq_end == 0


def test_only_the_first_unexpected_error_is_reported() -> None:
    r = two_buffers([], {"error": ValueError("a"), "seq_start": 0, "seq_end": 5},
                    {"error": ValueError("b"), "seq_start": 5, "seq_end": 9})
    assert [v.message for v in check_run(r)] == ["register() of kv_buffer raised ValueError: a"]
    r = two_buffers([reg(1, BASE, 128)], {"error": ValueError("a"), "seq_end": 5},
                    {"error": ValueError("b"), "seq_start": 5, "seq_end": 9},
                    expect="register-error")
    assert rules(r) == ["unexpected-error"]


def test_unexpected_error_names_the_failing_call_not_an_earlier_success() -> None:
    trace = [reg(1, BASE, 128), unreg(2, BASE), reg(3, BASE + 128, 128, code=2)]
    (v,) = [v for v in check_run(record(trace, error=MemoryError("x")))
            if v.rule == "unexpected-error"]
    assert "cudaHostRegister(kv_buffer+0x80, 128) returned 2" in v.message


def test_the_per_call_ceiling_is_explained_in_gib() -> None:
    big = 512 << 30
    geo = make_geometry("mla", layout="page_first_direct", layer_num=1, kv_lora_rank=512,
                        qk_rope_head_dim=64, dtype="bfloat16", page_size=64,
                        page_num=(big // (576 * 2 * 64)) + 1)
    spec = geo.buffers()[0]
    b = BufferRun(0, spec, BASE, None, MemoryError("x"), None, False, 0, 5,
                  summarize_exception(MemoryError("x")), None)
    r = RunRecord(geo, 1 << 40, "success", 512 << 30, [b],
                  [reg(1, BASE, spec.nbytes, code=2)])
    (v,) = [v for v in check_run(r) if v.rule == "unexpected-error"]
    gib = spec.nbytes / (1 << 30)
    assert f": a single call of {gib:.1f} GiB is at or above the 512 GiB per-call ceiling of " \
        "R580+ drivers; chunk it" in v.message


def test_failed_calls_at_the_buffers_seq_bounds() -> None:
    # a failed call at seq_start is the buffer's: not named -> error-reported; swallowed ->
    # error-swallowed; a failed call at seq_end is not
    at_start = record([reg(5, BASE, 128, code=2)], expect="register-error",
                      error=RuntimeError("setup failed"), seq_start=5, seq_end=9)
    assert rules(at_start) == ["error-reported"]
    at_end = record([reg(9, BASE, 128, code=2)], expect="register-error",
                    error=RuntimeError("setup failed"), seq_start=5, seq_end=9)
    assert "error-reported" not in rules(at_end)
    swallowed = record([reg(5, BASE, 128, code=2)], seq_start=5, seq_end=9)
    assert "error-swallowed" in rules(swallowed)


def test_rollback_counts_only_the_buffers_own_chunks() -> None:
    # the success at seq 9 is the next buffer's: one earlier chunk, not two
    trace = [reg(5, BASE, 128), reg(6, BASE + 128, 128, code=2), reg(9, BASE + 128, 64)]
    r = record(trace, expect="register-error", error=RuntimeError("failed: 2"), seq_start=5,
               seq_end=9, live_end=[(BASE, 128)])
    (v,) = [v for v in check_run(r) if v.rule == "not-rolled-back"]
    assert "no rollback (none of its 1 earlier chunk(s) was released" in v.message


def test_a_rollback_fault_does_not_hide_the_next_leftover() -> None:
    trace = [reg(1, BASE, 64), reg(2, BASE + 64, 64), reg(3, BASE + 128, 128, code=2),
             unreg(4, BASE, code=1, injected=True)]
    r = record(trace, expect="register-error", error=RuntimeError("failed: 2"),
               live_end=[(BASE, 64), (BASE + 64, 64)])
    vs = [v for v in check_run(r) if v.rule == "not-rolled-back"]
    assert len(vs) == 1 and vs[0].message.startswith("chunk [kv_buffer+0x40, +64)")


def test_teardown_raised_sorts_before_error_pending() -> None:
    pend = [Pending("teardown", "cuda-bindings", 2, "cudaErrorMemoryAllocation")]
    boom = (0, 0, RuntimeError("boom"))
    r = record(_ok_run(), teardown_start=60, teardown_errors=[boom], pending=pend)
    assert rules(r) == ["teardown-raised", "error-pending"]
