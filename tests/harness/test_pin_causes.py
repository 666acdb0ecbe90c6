"""The report's hints and causes block (harness/run/causes.py): when each hint is said, and
how long the block is. Each test is a behaviour a surviving mutant changed
(docs/mutation-testing.md)."""

from __future__ import annotations

from kvreg.harness.run.causes import Cause, causes, dedupe, hints, render_causes
from kvreg.harness.run.result import INTERNAL_ERROR, ScenarioResult, Violation

NONE = Violation("registered", "register() of kv returned normally but registered none of its "
                 "256 bytes; copies from there run on the pageable path")
PART = Violation("registered", "register() of kv returned normally but [kv+0x80, +128) is not "
                 "covered by any live registration: 128 of 256 bytes registered; copies from "
                 "there run on the pageable path")
OVER = Violation("mr-over-limit", "call #2 register_buffer(kv+0x0, 256) asks for one MR of "
                 "256 bytes, above the effective MR limit 128")


def fail(i: int, *vs: Violation) -> ScenarioResult:
    return ScenarioResult(f"p/{i}", "p", "fail", list(vs))


def test_the_pinning_hint_counts_the_scenarios_that_pinned_nothing() -> None:
    out = hints([fail(1, NONE), fail(2, NONE), fail(3, PART)])
    assert len(out) == 1
    assert out[0].startswith("2 scenario(s) fail only because register() returned normally "
                             "and pinned nothing.")
    assert "--pinning optional" in out[0]


def test_a_partial_pin_gets_no_pinning_hint() -> None:
    # with --pinning optional a partial pin still fails: the hint would mislead
    assert hints([fail(1, PART)]) == []
    assert hints([fail(1, NONE, PART)]) == []


def test_no_pinning_hint_once_pinning_is_given() -> None:
    assert hints([fail(1, NONE)], pinning="required") == []


def test_the_own_limit_hint_only_for_scenarios_skipped_for_it() -> None:
    own = ScenarioResult("m/1", "m", "skip", reason="the scenario lets register compute its "
                         "own MR limit (mooncake limit = \"own\")")
    other = ScenarioResult("m/2", "m", "skip", reason="a cuda-style implementation does not "
                           "run mooncake scenarios")
    assert hints([other]) == []
    out = hints([own, other])
    assert len(out) == 1 and out[0].startswith("1 Mooncake scenario(s) were skipped")
    assert "default None" in out[0]


def test_the_mr_over_limit_hint_only_where_an_mr_was_over_the_limit() -> None:
    out = hints([fail(1, OVER), fail(2, OVER), fail(3, PART)], style="mooncake")
    assert len(out) == 1
    assert out[0].startswith("2 scenario(s) made MRs above the max_mr_size register was given")
    assert hints([fail(3, PART), ScenarioResult("p/4", "p", "pass")], style="mooncake") == []


def _causes(n: int) -> list[Cause]:
    return [Cause("leak", f"impl.py:{i}", "x()", f"m{i}", [f"p/{i}", f"q/{i}"][: 1 + i % 2])
            for i in range(n)]


def test_the_causes_block_shows_the_top_and_counts_the_rest() -> None:
    found = _causes(13)
    lines = render_causes(found, top=10)
    assert lines[0] == "causes (13, most frequent first):"
    assert len(lines) == 1 + 2 * 10 + 1
    assert lines[1] == "      1 scenario(s)  [leak]  impl.py:0: x()"
    assert lines[2] == "        e.g. p/0: m0"
    rest = sum(c.scenarios for c in found[10:])
    assert lines[-1] == (f"  ... and 3 more cause(s) over {rest} scenario-cause pair(s) "
                         "(--json lists every cause)")


def test_a_block_of_exactly_the_top_has_no_more_line() -> None:
    lines = render_causes(_causes(10), top=10)
    assert len(lines) == 21 and not lines[-1].startswith("  ... and")
    assert render_causes([]) == []
    one = render_causes([Cause("error", "", "", "ran past 5 s", ["p/1"])])
    assert one[1] == "      1 scenario(s)  [error]  (no line of the code under test)"


def test_identical_violations_are_counted_once_each() -> None:
    at = {"where": "impl.py:9", "code": "reg(p, 0)"}
    loop = [Violation("register-size-zero", f"call #{n} registers 0 bytes", n, count=2, **at)
            for n in (1, 2, 3)]
    (once,) = dedupe(loop)
    assert once.count == 6 and once.message == "call #1 registers 0 bytes"


def test_causes_count_scenarios_most_frequent_first() -> None:
    at = {"where": "impl.py:9", "code": "x()"}
    leak = Violation("leak", "chunk left", **at)
    gap = Violation("registered", "gap", where="impl.py:3", code="y()")
    results = [
        ScenarioResult("a/1", "a", "fail", [gap]),
        ScenarioResult("a/2", "a", "fail", [leak, leak]),      # one scenario, counted once
        ScenarioResult("a/3", "a", "fail", [leak]),
        ScenarioResult("a/4", "a", "pass", [leak]),             # a pass is no cause
        ScenarioResult("a/5", "a", "skip", [leak], reason="needs a GPU"),
    ]
    found = causes(results)
    assert [(c.rule, c.ids) for c in found] == [("leak", ["a/2", "a/3"]),
                                                ("registered", ["a/1"])]


def _crash(i: int, caller: str, frame: str, exc: str) -> ScenarioResult:
    tb = (f"Traceback (most recent call last):\n"
          f'  File "kvreg/harness/run/core.py", line 40, in run\n    go()\n'
          f'  File "{caller}", line 7, in step\n    judge()\n'
          f'  File "{frame}", line 99, in judge\n    x = table[key]\n{exc}\n')
    return ScenarioResult(f"k/{i}", "k", INTERNAL_ERROR, reason=exc, tb=tb)


def test_kvregs_own_crashes_group_by_innermost_frame_and_exception() -> None:
    # one kvreg bug reached from two callers is one cause; the same frame raising another
    # exception is another bug
    same = [_crash(1, "a.py", "core.py", "KeyError: 'x'"),
            _crash(2, "b.py", "core.py", "KeyError: 'x'")]
    assert [c.scenarios for c in causes(same)] == [2]
    other = [*same, _crash(3, "a.py", "core.py", "ValueError: bad")]
    assert sorted(c.scenarios for c in causes(other)) == [1, 2]


def test_a_scenario_failing_one_rule_twice_is_counted_once() -> None:
    (c,) = causes([fail(1, OVER), fail(2, OVER, OVER)])
    assert c.ids == ["p/1", "p/2"] and c.scenarios == 2
