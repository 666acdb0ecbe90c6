"""The plugin's kvreg_baseline: recorded failures are strict xfails whose reason is the rule."""

from __future__ import annotations

import pytest

# torch must already be imported here: pytester's in-process runs restore sys.modules.
import torch  # noqa: F401

from ..helpers.scenario_text import (
    ABOVE_LIMIT,
    BYTE_OFFSET_IMPL,
    FAIL_MIDDLE_CHUNK,
    write_scenarios,
)


def _project(pytester: pytest.Pytester, baseline: str, *, impl: bool = True) -> None:
    write_scenarios(pytester.path / "kv_scenarios" / "mla.toml", ABOVE_LIMIT, FAIL_MIDDLE_CHUNK)
    pytester.makepyfile(mypool=BYTE_OFFSET_IMPL)
    ini = "[pytest]\nkvreg_scenarios = kv_scenarios\nkvreg_baseline = kvreg-baseline.txt\n"
    if impl:
        ini += "kvreg_impl = mypool.py:register\nkvreg_style = sglang\n"
    pytester.makeini(ini)
    (pytester.path / "kvreg-baseline.txt").write_text(baseline)


def test_known_failure_is_a_strict_xfail_with_the_rule_as_reason(
        pytester: pytest.Pytester) -> None:
    _project(pytester, "# known\nmla/above-limit seams-aligned\n"
                       "mla/above-limit transfer-failed\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "-rx")
    result.assert_outcomes(passed=1, xfailed=1)
    result.stdout.fnmatch_lines(["*XFAIL*mla/above-limit*known failure (kvreg baseline): "
                                 "*transfer-failed*"])


def test_new_failure_fails(pytester: pytest.Pytester) -> None:
    _project(pytester, "# nothing known\n")
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1, failed=1)


def test_known_scenario_failing_another_rule_fails(pytester: pytest.Pytester) -> None:
    _project(pytester, "mla/above-limit leak\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*[[]transfer-failed] page 238*"])


def test_fixed_failure_is_a_strict_xpass_failure(pytester: pytest.Pytester) -> None:
    # kvreg's reference passes: the recorded failure is gone, strict xfail turns that red
    _project(pytester, "mla/above-limit transfer-failed\n", impl=False)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*XPASS(strict)*known failure (kvreg baseline)*"])


def test_command_line_baseline_and_a_bad_file(pytester: pytest.Pytester) -> None:
    _project(pytester, "mla/above-limit\n")          # malformed line
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*kvreg-baseline.txt:1: expected '<scenario id> <rule>'*"])
    (pytester.path / "other.txt").write_text("mla/above-limit transfer-failed\n"
                                             "mla/above-limit seams-aligned\n")
    pytester.runpytest("-p", "no:cacheprovider", "--kvreg-baseline", "other.txt"
                       ).assert_outcomes(passed=1, xfailed=1)
