"""harness/run/rejection.py: the rejection contract's three rules, one body that each target
words its own way (harness/run/contract.py). The targets' own tests pin their messages
(tests/harness/test_check_run_unit.py, tests/mooncake_target/test_pin_rules_mooncake.py);
these pin the shared body: its words come from the caller, and each rule fires alone."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from kvreg.harness.run.rejection import REJECTION_RULES, RejectionWords, check_rejection

WORDS = RejectionWords("width", "w", "cap", "bound", "pinIt", " -- refuse it")


@dataclass
class Buf:
    name: str
    granularity: int | None
    error: BaseException | None = None
    seq_start: int = 0
    seq_end: int = 0


@dataclass
class Call:
    seq: int


def _rules(expect: str, bufs: list[Buf], calls: list[Call]) -> dict[str, list[str]]:
    return {rule: [v.message for v in check_rejection(rule, WORDS, expect, 100, bufs,
                                                       lambda b: b.name, calls)]
            for rule in REJECTION_RULES}


def test_an_accepted_granularity_above_the_limit_is_not_rejected_in_the_callers_words() -> None:
    got = _rules("rejected", [Buf("a", 50, seq_end=2), Buf("b", 300, seq_end=4)], [Call(1)])
    assert got == {"not-rejected": ["register() accepted width 300 of b with cap 100 -- "
                                    "refuse it"],
                   "rejected-too-late": [], "rejected-wrong-error": []}
    none_big = _rules("rejected", [Buf("a", None, seq_end=2)], [])
    assert none_big["not-rejected"] == ["register() accepted every buffer with cap 100 -- "
                                        "refuse it"]


def test_calls_before_the_rejection_are_too_late_and_not_the_wrong_error() -> None:
    late = Buf("b", 300, RuntimeError("no"), seq_start=3, seq_end=6)
    got = _rules("rejected", [Buf("a", 50, seq_end=3), late], [Call(1), Call(4), Call(5)])
    assert got == {"not-rejected": [], "rejected-wrong-error": [],
                   "rejected-too-late": ["register() of b made 2 pinIt call(s) before "
                                         "rejecting width 300 > bound 100"]}


@pytest.mark.parametrize(("error", "wrong"), [
    (TypeError("bad"), ["register() of b rejected the w with TypeError: bad; expected "
                        "ValueError"]),
    (ValueError("too wide"), [])])
def test_a_rejection_before_any_call_must_be_a_value_error(error: BaseException,
                                                           wrong: list[str]) -> None:
    got = _rules("rejected", [Buf("b", 300, error, seq_start=3, seq_end=6)], [Call(1)])
    assert got == {"not-rejected": [], "rejected-too-late": [], "rejected-wrong-error": wrong}


def test_nothing_fires_where_the_scenario_expects_no_rejection() -> None:
    bufs = [Buf("b", 300, TypeError("bad"), seq_start=0, seq_end=6)]
    for expect in ("success", "register-error"):
        assert _rules(expect, bufs, [Call(1)]) == {r: [] for r in REJECTION_RULES}
