"""Baseline files: what they record, how they read back, and how a run compares with one."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvreg.harness.run.baseline import (
    ERROR_RULE,
    BaselineError,
    compare,
    failure_rules,
    load_baseline,
    parse_baseline,
    render_baseline,
    write_baseline,
)
from kvreg.harness.run.result import ScenarioResult, Violation


def _result(sid: str, verdict: str, *rules: str) -> ScenarioResult:
    return ScenarioResult(id=sid, pool="mla", verdict=verdict,
                          violations=[Violation(r, f"{r} broke") for r in rules],
                          reason="boom" if verdict == "error" else "")


def test_rules_of_a_result() -> None:
    assert failure_rules(_result("a/b", "pass")) == ()
    assert failure_rules(_result("a/b", "skip")) == ()
    assert failure_rules(_result("a/b", "error")) == (ERROR_RULE,)
    # repeated rules collapse, first-seen order is kept
    assert failure_rules(_result("a/b", "fail", "seam", "leak", "seam")) == ("seam", "leak")


def test_written_file_is_sorted_one_line_per_rule_and_reads_back(tmp_path: Path) -> None:
    results = [_result("z/last", "fail", "transfer-failed"), _result("a/first", "pass"),
               _result("m/mid", "fail", "leak", "double-unregister"),
               _result("e/err", "error")]
    path = tmp_path / "kvreg-baseline.txt"
    assert write_baseline(path, results) == 4
    body = [line for line in path.read_text().splitlines() if not line.startswith("#")]
    assert body == ["e/err error", "m/mid double-unregister", "m/mid leak",
                    "z/last transfer-failed"]
    baseline = load_baseline(path)
    assert baseline.rules("m/mid") == {"leak", "double-unregister"}
    assert baseline.rules("a/first") == frozenset() and len(baseline) == 4


ids = st.lists(st.from_regex(r"[a-z]{1,6}/[a-z_]{1,8}/[a-z0-9-]{1,8}", fullmatch=True),
               min_size=0, max_size=12, unique=True)
rules = st.lists(st.sampled_from(["transfer-failed", "leak", "no-rollback", "ceiling"]),
                 min_size=1, max_size=3)


@given(ids.flatmap(lambda xs: st.tuples(st.just(xs), st.lists(
    st.tuples(st.sampled_from(["pass", "fail", "error", "skip"]), rules),
    min_size=len(xs), max_size=len(xs)))))
def test_a_run_compared_with_its_own_baseline_is_all_known(data: tuple[list[str], list]) -> None:
    sids, outcomes = data
    results = [_result(s, v, *r) for s, (v, r) in zip(sids, outcomes, strict=True)]
    text = render_baseline(results)
    # stable: the same results in another order give byte-identical text
    assert render_baseline(list(reversed(results))) == text
    outcome = compare(results, parse_baseline(text, "mem"))
    assert outcome.ok and not outcome.fixed
    assert {sid for sid, _ in outcome.known} == {r.id for r in results if failure_rules(r)}


def test_new_known_and_fixed_are_told_apart() -> None:
    baseline = parse_baseline("# c\nmla/a/one seam\nmla/b/two seam\nmla/b/two leak\nmla/c/gone "
                      "leak\nmla/not/run seam\n", "mem")
    results = [_result("mla/a/one", "fail", "seam"),             # known
               _result("mla/b/two", "fail", "seam"),             # known, 'leak' went away
               _result("mla/c/gone", "pass"),                    # fixed
               _result("mla/d/new", "fail", "seam"),             # new scenario failing
               _result("mla/a/one2", "error")]                   # new error
    out = compare(results, baseline)
    assert not out.ok
    assert out.known == [("mla/a/one", ("seam",)), ("mla/b/two", ("seam",))]
    assert out.new == [("mla/d/new", ("seam",)), ("mla/a/one2", ("error",))]
    # scenarios that did not run (-k, --shard) are never reported as fixed
    assert out.fixed == [("mla/b/two", "leak"), ("mla/c/gone", "leak")]
    lines = out.lines()
    assert "no longer fails, remove from the baseline: mla/c/gone leak" in lines
    assert "NEW failure (not in the baseline): mla/d/new [seam]" in lines


def test_a_known_scenario_breaking_a_new_rule_is_new() -> None:
    out = compare([_result("x/y/z", "fail", "seam", "leak")], parse_baseline("x/y/z seam\n", "m"))
    assert out.new == [("x/y/z", ("seam", "leak"))] and not out.known


@pytest.mark.parametrize(("content", "message"), [
    ("mla/a/one\n", "baseline.txt:1: expected '<scenario id> <rule>', got 'mla/a/one'"),
    ("# ok\n\nmla/a/one seam extra\n", "baseline.txt:3: expected '<scenario id> <rule>'"),
])
def test_malformed_lines_are_named(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "baseline.txt"
    path.write_text(content)
    with pytest.raises(BaselineError, match=message.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[")):
        load_baseline(path)


def test_unreadable_baselines_are_one_sentence(tmp_path: Path) -> None:
    with pytest.raises(BaselineError, match="no such baseline file"):
        load_baseline(tmp_path / "missing.txt")
    with pytest.raises(BaselineError, match="is a folder"):
        load_baseline(tmp_path)
    (tmp_path / "bin.txt").write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(BaselineError, match="not UTF-8 text"):
        load_baseline(tmp_path / "bin.txt")
