"""The end-state rules' building blocks on plain data (harness/run/endstate.py).

``error-reported`` reads a whole exception chain: the code may sit on the outer exception
only, the cause may carry none, and a ``bool`` ``code`` attribute is not an error code
(``True == 1`` would otherwise "report" cudaErrorInvalidValue).
"""

from __future__ import annotations

import os
from pathlib import Path

import kvreg.fakes
from kvreg.harness.run.endstate import (
    BufferEnd,
    FailedCall,
    check_error_reported,
    check_registered,
    check_seams_aligned,
    coverage_problems,
    fully_registered,
    live_ranges,
    rollback_phrase,
    summarize_exception,
)

BASE = 0x10000
OOM = FailedCall(7, "cudaHostRegister", BASE + 0x100, 0x100, 2, "cudaErrorMemoryAllocation",
                 "out of memory")
INVALID = FailedCall(7, "cudaHostRegister", BASE, 0x100, 1, "cudaErrorInvalidValue",
                     "invalid argument")


def _chained(outer: BaseException, cause: BaseException) -> BaseException:
    """``outer`` raised ``from cause``, with its traceback, as a register would raise it."""
    try:
        raise outer from cause
    except BaseException as exc:
        return exc


def _with_code(exc: BaseException, code: object) -> BaseException:
    exc.code = code  # type: ignore[attr-defined]
    return exc


def _end(raised: BaseException | None, failed: list[FailedCall]) -> BufferEnd:
    return BufferEnd("kv_buffer", BASE, 0x1000, 0x100, raised is None,
                     summarize_exception(raised) if raised is not None else None, 9,
                     [], failed)


def test_a_code_only_on_the_outer_exception_reports_it() -> None:
    outer = _with_code(RuntimeError("pinning failed"), 2)
    exc = _chained(outer, cause=OSError("no detail"))
    raised = summarize_exception(exc)
    assert raised.code_attr == 2
    assert raised.chain == ("RuntimeError: pinning failed", "OSError: no detail")
    assert OOM.carried_by(raised) and not INVALID.carried_by(raised)
    assert check_error_reported([_end(exc, [OOM])]) == []


def test_a_cause_without_a_code_still_reports_by_its_message() -> None:
    exc = _chained(RuntimeError("register() failed"),
                   cause=RuntimeError("cudaErrorMemoryAllocation from cudaHostRegister"))
    assert summarize_exception(exc).code_attr is None
    assert check_error_reported([_end(exc, [OOM])]) == []
    # neither the outer nor its codeless cause names the error: a violation
    bare = _chained(RuntimeError("register() failed"), cause=RuntimeError("see log"))
    (v,) = check_error_reported([_end(bare, [OOM])])
    assert v.rule == "error-reported" and v.seq == 9
    assert v.message == (
        "register() of kv_buffer raised RuntimeError: register() failed, which does not name "
        "cudaErrorMemoryAllocation (2, out of memory) returned by cudaHostRegister("
        "kv_buffer+0x100, 256) (call #8): say the failing code, its name or its string")


def test_the_code_of_a_cause_counts_when_the_outer_has_none() -> None:
    exc = _chained(RuntimeError("register() failed"), cause=_with_code(OSError("x"), 2))
    assert summarize_exception(exc).code_attr == 2
    # the outer's code wins over its cause's
    both = _chained(_with_code(RuntimeError("a"), 1), cause=_with_code(OSError("b"), 2))
    assert summarize_exception(both).code_attr == 1
    assert not OOM.carried_by(summarize_exception(both))


def test_a_bool_code_is_not_an_error_code() -> None:
    exc = _with_code(RuntimeError("register() failed"), True)
    raised = summarize_exception(exc)
    assert raised.code_attr is None
    assert not INVALID.carried_by(raised)
    assert [v.rule for v in check_error_reported([_end(exc, [INVALID])])] == ["error-reported"]
    assert summarize_exception(_with_code(RuntimeError("x"), "2")).code_attr is None


def test_the_implicit_context_is_read_too() -> None:
    try:
        try:
            raise OSError("cudaHostRegister returned 2")
        except OSError:
            raise RuntimeError("pool setup failed")  # noqa: B904 (the context is the point)
    except RuntimeError as exc:
        raised = summarize_exception(exc)
    assert raised.chain == ("RuntimeError: pool setup failed",
                            "OSError: cudaHostRegister returned 2")
    assert OOM.carried_by(raised)


def test_carried_by_matches_the_code_as_a_whole_number_only() -> None:
    def says(text: str) -> bool:
        return OOM.carried_by(summarize_exception(RuntimeError(text)))

    assert says("rc=2") and says("error 2") and says("(2)")
    assert not says("rc=12") and not says("rc=21") and not says("-2") and not says("2.5")
    assert not says("x2") and not says("v2") and not says("")
    # a sentence ending on the code names it (torch/cuda/_pin_memory_utils.py's message)
    assert says("Registering memory failed with cudaError: 2. It's possible that ...")
    assert says("failed: 2.") and not says("failed: 2.0") and not says("1.2")
    assert says("cudaHostRegister: out of memory") and says("cudaErrorMemoryAllocation")
    unnamed = FailedCall(1, "register_buffer", 0, 1, -600, "", "")
    assert not unnamed.carried_by(summarize_exception(RuntimeError("failed")))
    assert unnamed.carried_by(summarize_exception(RuntimeError("failed with -600")))


def test_programming_errors_are_named_as_a_broken_error_path() -> None:
    exc = TypeError("unsupported operand type(s)")
    (v,) = check_error_reported([_end(exc, [OOM])])
    assert "raised TypeError: unsupported operand type(s)" in v.message
    assert "instead of reporting cudaErrorMemoryAllocation (2, out of memory)" in v.message
    assert "its error path is broken and hides the real failure" in v.message


def test_error_reported_needs_both_a_raise_and_a_failed_call() -> None:
    assert check_error_reported([_end(None, [OOM])]) == []
    assert check_error_reported([_end(RuntimeError("x"), [])]) == []
    # only the first failed call must be named
    exc = RuntimeError("cudaErrorMemoryAllocation")
    assert check_error_reported([_end(exc, [OOM, INVALID])]) == []
    assert check_error_reported([_end(exc, [INVALID, OOM])]) != []


def test_chains_stop_at_cycles_and_at_eight() -> None:
    a, b = RuntimeError("a"), RuntimeError("b")
    a.__cause__, b.__cause__ = b, a
    assert summarize_exception(a).chain == ("RuntimeError: a", "RuntimeError: b")
    cur: BaseException = RuntimeError("0")
    for i in range(1, 12):
        nxt = RuntimeError(str(i))
        nxt.__cause__ = cur
        cur = nxt
    assert len(summarize_exception(cur).chain) == 8
    assert summarize_exception(RuntimeError("  \n")).chain == ("RuntimeError",)
    # the report keeps the message whole; error-reported judges each message's first line
    assert summarize_exception(RuntimeError("one\ntwo")).first == "RuntimeError: one two"
    assert summarize_exception(RuntimeError("one\ntwo")).heads == ("RuntimeError: one",)


def test_live_ranges_replay_only_successful_calls() -> None:
    events = [("reg", 1, 10, True), ("reg", 2, 20, False), ("unreg", 1, 0, False),
              ("reg", 3, 30, True), ("unreg", 3, 0, True), ("unreg", 9, 0, True)]
    assert live_ranges(events) == {1: 10}


def test_coverage_gaps_and_overlaps() -> None:
    def end(live: list[tuple[int, int]]) -> BufferEnd:
        return BufferEnd("b", BASE, 0x100, 0x10, True, live=[(BASE + o, n) for o, n in live])

    assert coverage_problems(end([(0, 0x100)])) == ([], [])
    assert fully_registered(end([(0, 0x80), (0x80, 0x80)]))
    assert coverage_problems(end([(0x10, 0xF0)])) == ([(0, 0x10)], [])
    assert coverage_problems(end([(0, 0x80)])) == ([(0x80, 0x80)], [])
    assert coverage_problems(end([(0, 0x90), (0x80, 0x80)])) == ([], [(0x80, 0x10)])
    assert coverage_problems(end([(0, 0x40), (0x50, 0x10)])) == \
        ([(0x40, 0x10), (0x60, 0xA0)], [])
    # ranges hanging over either edge count for the part inside the buffer only
    assert coverage_problems(end([(-0x10, 0x20), (0x10, 0x100)])) == ([], [])
    assert not fully_registered(end([]))


def test_registered_rule_messages() -> None:
    def end(live: list[tuple[int, int]], returned: bool = True) -> BufferEnd:
        return BufferEnd("b", BASE, 0x100, 0x10, returned, seq_end=4,
                         live=[(BASE + o, n) for o, n in live])

    (none,) = check_registered([end([])], "required")
    assert none.message == ("register() of b returned normally but registered none of its 256 "
                            "bytes; copies from there run on the pageable path")
    (part,) = check_registered([end([(0, 0x40), (0x50, 0x10)])], "required")
    assert part.message.startswith("register() of b returned normally but [b+0x40, +16) is "
                                   "not covered by any live registration (and 1 more gap(s)): "
                                   "80 of 256 bytes registered")
    (twice,) = check_registered([end([(0, 0x90), (0x80, 0x80)])], "required")
    assert "bytes [b+0x80, +16) are covered by two live registrations" in twice.message
    assert check_registered([end([])], "optional") == []          # the pageable fallback
    (half,) = check_registered([end([(0, 0x80)])], "optional")
    assert half.message.endswith("; with pinning optional only all or nothing passes")
    assert check_registered([end([], returned=False)], "required") == []
    assert check_registered([end([])], "required", skip=["b"]) == []


def test_rollback_phrase() -> None:
    left = [f"[c{i}]" for i in range(6)]
    assert rollback_phrase(3, 0, left[:1]) == ("no rollback (none of its 3 earlier chunk(s) was "
                                               "released; still registered: [c0])")
    assert rollback_phrase(3, 1, left[:4]) == (
        "partial rollback (released 1 of 3 earlier chunk(s); still registered: [c0], [c1], "
        "[c2], [c3])")
    assert rollback_phrase(6, 1, left).endswith("[c3] and 2 more)")


def _live(*spans: tuple[int, int], unit: int | None = 0x10, label: str = "b",
          failed: list[FailedCall] | None = None, returned: bool = True) -> BufferEnd:
    return BufferEnd(label, BASE, 0x100, unit, returned, seq_end=4,
                     live=[(BASE + o, n) for o, n in spans], failed=failed or [])


def test_seams_aligned_names_the_page_a_seam_cuts() -> None:
    (v,) = check_seams_aligned([_live((0, 0x28), (0x28, 0xD8))], 7)
    assert (v.rule, v.seq) == ("seams-aligned", 7)
    assert v.message == ("a seam between two registrations of b lies at offset 40 (b+0x28), "
                         "which cuts copy page 2 [32, 48) of 16 bytes: 8 bytes into it")
    (two,) = check_seams_aligned([_live((0, 0x28), (0x28, 0x30), (0x58, 0xA8))], 7)
    assert two.message.endswith("8 bytes into it (1 more misaligned seam(s))")
    assert check_seams_aligned([_live((0, 0x20), (0x20, 0xE0))], 7) == []


def test_seams_of_ranges_hanging_over_the_end_are_not_judged() -> None:
    # the second range starts at a misaligned offset but runs past the buffer's end: it is
    # not inside the buffer, so only the first range's end (aligned) is a seam
    assert check_seams_aligned([_live((0, 0x20), (0x28, 0x100))], 7) == []


def test_every_buffer_is_judged_not_only_up_to_the_first_skipped_one() -> None:
    skipped = _live((0, 0x28), (0x28, 0xD8), unit=None, label="a")
    single = _live((0, 0x100), label="s")
    bad = _live((0, 0x28), (0x28, 0xD8), label="c")
    assert [v.message.split(" lies")[0] for v in check_seams_aligned([skipped, single, bad],
                                                                     7)] == \
        ["a seam between two registrations of c"]
    gap = _live((0, 0x80), label="g")
    assert [v.message.split(" returned")[0] for v in
            check_registered([_live(label="x"), gap], "required", skip=["x"])] == \
        ["register() of g"]
    exc = RuntimeError("failed")
    quiet = _end(None, [OOM])
    loud = BufferEnd("k", BASE, 0x1000, 0x100, False, summarize_exception(exc), 9, [], [OOM])
    assert [v.message.split(" raised")[0] for v in check_error_reported([quiet, loud])] == \
        ["register() of k"]


def test_coverage_ignores_ranges_outside_the_buffer() -> None:
    full = _live((0, 0x100), (0x100, 0x40), (-0x40, 0x40))
    assert coverage_problems(full) == ([], [])


def test_recovered_warning_names_how_many_calls_failed() -> None:
    from kvreg.harness.run.endstate import recovered_warnings

    one = _live((0, 0x80), (0x80, 0x80), failed=[OOM])
    (w,) = recovered_warnings([one])
    assert w.rule == "recovered" and w.seq == 7
    assert w.message == ("cudaHostRegister(b+0x100, 256) (call #8) returned 2 "
                         "cudaErrorMemoryAllocation; register() recovered: b ended fully "
                         "registered in 2 registration(s) on aligned seams")
    (w2,) = recovered_warnings([_live((0, 0x100), failed=[OOM, INVALID])])
    assert "returned 2 cudaErrorMemoryAllocation and 1 more call(s) failed;" in w2.message
    # not fully registered, or misaligned, or raised: no "recovered" warning (other rules speak)
    assert recovered_warnings([_live((0, 0x80), failed=[OOM])]) == []
    assert recovered_warnings([_live((0, 0x28), (0x28, 0xD8), failed=[OOM])]) == []
    assert recovered_warnings([_live((0, 0x100), failed=[OOM], returned=False)]) == []
    # a buffer without failures does not stop the others being looked at
    assert len(recovered_warnings([_live((0, 0x100)), one])) == 1


def test_error_pending_sorts_last() -> None:
    from kvreg.harness.run.endstate import Pending, check_error_pending

    p = [Pending("register", "cuda-bindings", 2, "cudaErrorMemoryAllocation")]
    t = [Pending("register", "torch", 2, "cudaErrorMemoryAllocation")]
    (v,), () = check_error_pending(p, fallback=False)
    (f,), () = check_error_pending(t, fallback=True)
    (), (w,) = check_error_pending(t, fallback=False)
    assert v.seq == f.seq == w.seq == 1 << 43
    assert "drain it with cudaGetLastError through the same runtime" in v.message
    assert "a pageable fallback must leave nothing pending" in f.message
    assert w.message.endswith("(torch's binding has no cudaGetLastError to drain it)")


def _raise_here() -> None:
    raise RuntimeError("from the implementation")


def test_origin_is_the_innermost_frame_outside_the_fakes() -> None:
    try:
        _raise_here()
    except RuntimeError as exc:
        origin = summarize_exception(exc).origin
    assert origin == 'test_endstate_unit.py:' + str(_raise_here.__code__.co_firstlineno + 1) \
        + ': raise RuntimeError("from the implementation")'
    from kvreg.fakes.cuda.fake_cuda import FakeCuda

    fake = FakeCuda()
    try:
        fake.load_libcudart("libfoo.so")     # raises inside kvreg's fakes
    except ValueError as exc:
        inside = summarize_exception(exc).origin
    assert inside.startswith("test_endstate_unit.py:")
    assert "load_libcudart" in inside
    assert summarize_exception(RuntimeError("never raised")).origin == ""


def test_a_fine_buffer_or_entry_does_not_stop_the_next_being_judged() -> None:
    from kvreg.harness.run.endstate import Pending, check_error_pending, recovered_warnings

    named = _end(RuntimeError("cudaErrorMemoryAllocation"), [OOM])
    unnamed = BufferEnd("k", BASE, 0x1000, 0x100, False, summarize_exception(RuntimeError("x")),
                        9, [], [OOM])
    assert [v.message.split(" raised")[0] for v in check_error_reported([named, unnamed])] == \
        ["register() of k"]
    pend = [Pending("register", "cuda-bindings", 0, "cudaSuccess"),
            Pending("register", "cuda-bindings", 2, "cudaErrorMemoryAllocation")]
    assert len(check_error_pending(pend, fallback=False)[0]) == 1
    misaligned = _live((0, 0x28), (0x28, 0xD8), failed=[OOM], label="m")
    recovered = _live((0, 0x80), (0x80, 0x80), failed=[OOM], label="r")
    assert [w.message.split(" ended")[0].rsplit(" ", 1)[-1]
            for w in recovered_warnings([misaligned, recovered])] == ["r"]


def test_an_aligned_buffer_does_not_stop_the_next_seams_being_judged() -> None:
    aligned = _live((0, 0x20), (0x20, 0xE0), label="a")
    bad = _live((0, 0x28), (0x28, 0xD8), label="c")
    assert [v.message.split(" lies")[0] for v in check_seams_aligned([aligned, bad], 7)] == \
        ["a seam between two registrations of c"]


def test_the_origin_skips_the_fakes_frames_however_their_path_is_spelled(
        tmp_path: Path) -> None:
    # kvreg imported through a symlinked folder names the fake's frames by the link: the
    # origin is still the implementation's own line, never a line of kvreg's fake
    fakes = Path(kvreg.fakes.__file__).resolve().parent
    link = tmp_path / "kvreg_fakes_link"
    os.symlink(fakes, link)
    fake_file = str(link / "torch_face_like.py")       # a path under the link, not resolved
    fake_code = compile("def fake():\n    raise TypeError('incompatible function arguments')\n",
                        fake_file, "exec")
    user_code = compile("def register():\n    fake()\n", str(tmp_path / "mine.py"), "exec")
    space: dict[str, object] = {}
    exec(fake_code, space)
    exec(user_code, space)
    (tmp_path / "mine.py").write_text("def register():\n    fake()\n")
    try:
        space["register"]()   # type: ignore[operator]
    except TypeError as exc:
        origin = summarize_exception(exc).origin
    assert origin == "mine.py:2: fake()", origin
