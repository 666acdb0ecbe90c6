"""The CUDA target's rules at edges the catalog's scenarios never reach (harness/cuda/checks.py).

Each test is a behaviour a surviving mutant changed (docs/mutation-testing.md): the verdict a
run record gets and the sentence a user reads. Records are built by hand, as the real
runtime's trace would show them (docs/cuda-runtime.md §2-§3: cudaHostUnregister of a base that
is not live returns 713 cudaErrorHostMemoryNotRegistered, of a pointer inside one 1).
"""

from __future__ import annotations

from typing import Any

from kvreg.fakes.recorder import TraceEntry
from kvreg.harness.cuda.checks import BufferRun, RunRecord, check_run, check_warnings
from kvreg.harness.pools.registry import make_geometry
from kvreg.harness.run.endstate import Pending, summarize_exception

GEO = make_geometry("mla", layout="page_first_direct", layer_num=2, kv_lora_rank=4,
                    qk_rope_head_dim=4, dtype="bfloat16", page_size=2, page_num=4)
SPEC = GEO.buffers()[0]          # kv_buffer, 256 bytes, copy pages of 64
BASE = 0x7F0000000000
TEARDOWN = ("register", "teardown")


def reg(seq: int, ptr: int, size: int, code: int = 0) -> TraceEntry:
    return TraceEntry(seq, "torch", "cudaHostRegister", (ptr, size, 0), code, code, False, 0)


def unreg(seq: int, ptr: int, code: int = 0, injected: bool = False) -> TraceEntry:
    return TraceEntry(seq, "torch", "cudaHostUnregister", (ptr,), code, code, injected, 0)


def record(trace: list[TraceEntry], *, error: BaseException | None = None,
           expect: str = "success", seq_end: int = 50, **kw: Any) -> RunRecord:
    b = BufferRun(0, SPEC, BASE, 64, error, None, error is None, 0, seq_end,
                  summarize_exception(error) if error is not None else None, 64)
    return RunRecord(GEO, 128, expect, None, [b], trace, **kw)


def rules(r: RunRecord) -> list[str]:
    return [v.rule for v in check_run(r)]


OK_RUN = [reg(1, BASE, 128), reg(2, BASE + 128, 128), unreg(60, BASE), unreg(61, BASE + 128)]
BOOM = (0, 0, RuntimeError("cudaHostUnregister failed"))


# -- teardown-raised: a fault injected into teardown excuses it ---------------------------------

def test_a_fault_injected_into_the_first_teardown_call_excuses_the_raise() -> None:
    # the fault hits the very call teardown starts with (its seq is teardown_start): the
    # teardown that raised after it did what a correct one does
    trace = [reg(1, BASE, 128), reg(2, BASE + 128, 128),
             unreg(60, BASE, code=2, injected=True), unreg(61, BASE + 128)]
    r = record(trace, teardown_start=60, teardown_errors=[BOOM], exercised=TEARDOWN,
               live_end=[(BASE, 128)])
    assert "teardown-raised" not in rules(r), check_run(r)


def test_an_injected_fault_before_teardown_does_not_excuse_a_raising_teardown() -> None:
    # the injected unregister failed during register's rollback (seq 3 < teardown_start 60)
    trace = [reg(1, BASE, 128), reg(2, BASE + 128, 128), unreg(3, BASE + 128, code=2,
                                                                injected=True),
             unreg(60, BASE), unreg(61, BASE + 128)]
    r = record(trace, teardown_start=60, teardown_errors=[BOOM], exercised=TEARDOWN)
    assert rules(r) == ["teardown-raised"]
    assert check_run(r)[0].message == ("teardown #1 of kv_buffer raised RuntimeError: "
                                       "cudaHostUnregister failed")


# -- unregister-not-a-live-base: judged past an injected failure --------------------------------

def test_unregisters_after_an_injected_failure_are_still_judged() -> None:
    trace = [reg(1, BASE, 128), reg(2, BASE + 128, 128),
             unreg(60, BASE, code=2, injected=True), unreg(61, BASE + 128),
             unreg(62, BASE + 128, code=713), unreg(63, BASE + 64, code=1)]
    r = record(trace, teardown_start=60, exercised=("register",))
    vs = [v for v in check_run(r) if v.rule == "unregister-not-a-live-base"]
    assert [v.message for v in vs] == [
        "call #63 unregisters kv_buffer+0x80, which was already released "
        "(713 cudaErrorHostMemoryNotRegistered)",
        "call #64 unregisters kv_buffer+0x40, which is inside a registration, not its base "
        "(1 cudaErrorInvalidValue)"]


# -- call numbers are 1-based in every rule's message ------------------------------------------

def test_every_rule_names_the_call_one_based() -> None:
    zero = check_run(record([reg(4, BASE, 0)]))
    assert zero[0].message.startswith("call #5 registers 0 bytes at kv_buffer+0x0")
    outside = check_run(record([reg(6, BASE + 200, 128)]))
    assert outside[0].message.startswith("call #7 registers [kv_buffer+0xc8, +128)")
    over = [v for v in check_run(record([reg(8, BASE, 256)])) if v.rule == "chunk-over-limit"]
    assert over[0].message.startswith("call #9 registers 256 bytes at kv_buffer+0x0")


def test_a_swallowed_error_names_its_first_unretried_failed_call_with_that_calls_code(
        ) -> None:
    # two chunks fail and neither is tried again: the first is named, with its own code
    trace = [reg(1, BASE, 128, code=2), reg(2, BASE + 128, 128, code=1)]
    vs = check_run(record(trace))
    assert vs[0].rule == "error-swallowed" and vs[0].seq == 1
    assert vs[0].message.startswith("cudaHostRegister returned 2 (out of memory) at "
                                    "kv_buffer+0x0 (call #2) but register() of kv_buffer "
                                    "returned normally: the pool would run unpinned")


def test_a_swallowed_error_after_a_retry_names_the_retry() -> None:
    # chunk 2 failed with 2, its retry with 1, and register returned: the retry is the
    # failure it ended on (issue 24 §4: judge results)
    trace = [reg(1, BASE, 128), reg(2, BASE + 128, 128, code=2),
             reg(3, BASE + 128, 128, code=1)]
    vs = check_run(record(trace, live_end=[(BASE, 128)]))
    assert vs[0].rule == "error-swallowed" and vs[0].seq == 3
    assert vs[0].message.startswith("cudaHostRegister returned 1 (invalid argument) at "
                                    "kv_buffer+0x80 (call #4) but register() of kv_buffer "
                                    "returned normally: the pool would run partly unpinned")


def test_a_leak_a_rollback_fault_left_names_the_rollback_call() -> None:
    # register failed at chunk 2, its rollback unregister of chunk 1 got an injected fault,
    # and register() returned normally: the chunk is pinned for good and nothing tracks it
    trace = [reg(1, BASE, 128), reg(2, BASE + 128, 128, code=2),
             unreg(3, BASE, code=1, injected=True)]
    r = record(trace, live_end=[(BASE, 128)], teardown_start=60, exercised=TEARDOWN)
    leaks = [v for v in check_run(r) if v.rule == "leak"]
    assert [v.message for v in leaks] == [
        "chunk [kv_buffer+0x0, +128) is still registered: its rollback cudaHostUnregister "
        "(call #4) returned 1 cudaErrorInvalidValue and register() of kv_buffer returned "
        "normally, so nothing tracks it any more"]


# -- rollback: none or part --------------------------------------------------------------------

def test_a_partial_rollback_is_called_partial() -> None:
    # chunks 1 and 2 registered, chunk 3 failed, chunk 2 released, chunk 1 left
    trace = [reg(1, BASE, 64), reg(2, BASE + 64, 64), reg(3, BASE + 128, 128, code=2),
             unreg(4, BASE + 64)]
    r = record(trace, expect="register-error", error=RuntimeError("failed: 2"), seq_end=5,
               live_end=[(BASE, 64)])
    vs = [v for v in check_run(r) if v.rule == "not-rolled-back"]
    assert len(vs) == 1
    assert vs[0].message.endswith("failed: partial rollback (released 1 of 2 earlier chunk(s); "
                                  "still registered: [kv_buffer+0x0, +64))")


# -- transfers: the hint about copies across registrations ------------------------------------

class _Failed:
    ok, code, failed_row, detail = False, 1, 2, ""


def test_a_page_only_partly_registered_gets_no_across_registrations_hint() -> None:
    # page 2 is [128, 192): registered from 160 only, so a part of it is pageable; that copy
    # fails by the documented rule, not by the [UNC] one about two registrations
    trace = [reg(1, BASE, 128), reg(2, BASE + 160, 96)]
    vs = [v for v in check_run(record(trace, transfer=_Failed(), teardown_start=60))
          if v.rule == "transfer-failed"]
    assert len(vs) == 1 and "page 2 of kv_buffer [128, 192)" in vs[0].message
    assert "a copy across two registrations" not in vs[0].message
    # the same page wholly registered by two registrations does get it
    both = [reg(1, BASE, 128), reg(2, BASE + 128, 32), reg(3, BASE + 160, 96)]
    vs = [v for v in check_run(record(both, transfer=_Failed(), teardown_start=60))
          if v.rule == "transfer-failed"]
    assert "a copy across two registrations" in vs[0].message
    # two registrations that end exactly at the page's end cover it too
    exact = [reg(1, BASE, 128), reg(2, BASE + 128, 32), reg(3, BASE + 160, 32),
             reg(4, BASE + 192, 64)]
    vs = [v for v in check_run(record(exact, transfer=_Failed(), teardown_start=60))
          if v.rule == "transfer-failed"]
    assert "a copy across two registrations" in vs[0].message


def test_two_registrations_that_stop_inside_the_page_give_no_across_registrations_hint() -> None:
    # page 2 is [128, 192): registered [128, 144) and [144, 160), the rest pageable. Two
    # registrations meet inside it, yet a part is not pinned at all: the copy fails by the
    # documented mixed rule (docs/cuda-runtime.md §5.1: partly registered, error 1), not by
    # the [UNC] one of §5.4
    short = [reg(1, BASE, 128), reg(2, BASE + 128, 16), reg(3, BASE + 144, 16),
             reg(4, BASE + 192, 64)]
    vs = [v for v in check_run(record(short, transfer=_Failed(), teardown_start=60))
          if v.rule == "transfer-failed"]
    assert len(vs) == 1 and "spans registrations at offset 144" in vs[0].message
    assert "a copy across two registrations" not in vs[0].message


def test_a_page_inside_one_registration_gets_no_across_registrations_hint() -> None:
    # the copy failed for another reason: one registration holds the whole page
    one = [reg(1, BASE, 128), reg(2, BASE + 128, 128)]
    vs = [v for v in check_run(record(one, transfer=_Failed(), teardown_start=60))
          if v.rule == "transfer-failed"]
    assert len(vs) == 1 and "spans registrations at offset ?" in vs[0].message
    assert "a copy across two registrations" not in vs[0].message


# -- order -------------------------------------------------------------------------------------

def test_leaks_follow_the_transfer_and_come_before_teardown_raised() -> None:
    trace = [reg(1, BASE, 128), reg(2, BASE + 128, 128), unreg(60, BASE)]
    r = record(trace, transfer=type("T", (), {"ok": False, "code": 1, "failed_row": None,
                                              "detail": ""})(),
               live_end=[(BASE + 128, 128)], teardown_start=60, exercised=TEARDOWN,
               teardown_errors=[BOOM])
    assert rules(r) == ["transfer-failed", "leak", "teardown-raised"]


def test_a_seam_cutting_a_page_comes_after_the_transfer_and_before_leaks() -> None:
    # what register left (a seam inside copy page 1, [64, 128)) is said before what teardown
    # left (a chunk never released), and after the copy it broke: the report reads in the
    # order the run happened
    trace = [reg(1, BASE, 96), reg(2, BASE + 96, 32), reg(3, BASE + 128, 128), unreg(60, BASE),
             unreg(61, BASE + 96)]
    r = record(trace, transfer=type("T", (), {"ok": False, "code": 1, "failed_row": None,
                                              "detail": ""})(),
               live_end=[(BASE + 128, 128)], teardown_start=60, exercised=TEARDOWN)
    assert rules(r) == ["transfer-failed", "seams-aligned", "leak"]


def test_a_private_runtimes_pending_error_is_said_after_the_calls_warnings() -> None:
    # a NULL unregister in teardown (a warning at its call) and an error a private libcudart
    # still holds when teardown returned (a warning about the step): the report reads in the
    # order the run happened, the call's line first (docs/cuda-runtime.md §3, §6.1)
    trace = [reg(1, BASE, 128), reg(2, BASE + 128, 128), unreg(60, BASE), unreg(61, BASE + 128),
             unreg(62, 0, code=1)]
    pend = [Pending("teardown", "libcudart", 1, "cudaErrorInvalidValue", private=True)]
    ws = check_warnings(record(trace, teardown_start=60, exercised=TEARDOWN, pending=pend))
    assert [w.rule for w in ws] == ["unregister-null", "error-pending"]
    assert "a libcudart loaded apart from torch's" in ws[1].message


def test_leaks_are_listed_in_address_order() -> None:
    trace = [reg(1, BASE, 64), reg(2, BASE + 64, 64), reg(3, BASE + 128, 128)]
    r = record(trace, live_end=[(BASE, 64), (BASE + 64, 64), (BASE + 128, 128)],
               teardown_start=60, exercised=TEARDOWN)
    assert [v.message.split(")")[0] for v in check_run(r) if v.rule == "leak"] == [
        "chunk [kv_buffer+0x0, +64", "chunk [kv_buffer+0x40, +64",
        "chunk [kv_buffer+0x80, +128"]
