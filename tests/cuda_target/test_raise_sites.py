"""Causes at the line that failed (issue: "Causes at the line that failed"): a raise is placed
at the innermost frame that is not kvreg's, the standard library's or a binding's, the rule
call sites follow, so library code the implementation wraps counts as the user's; and a
teardown that raises a TypeError is ``teardown-raised`` even where a fault was injected into
teardown and other rules fire."""

from __future__ import annotations

from pathlib import Path

from kvreg.harness.run.core import run_scenario
from kvreg.harness.run.implementation import make_implementation
from kvreg.harness.scenario import Scenario

from ..helpers.paths import CUDA_IMPLS, impl_spec

FAIL_MIDDLE = "mla/page_first_direct/fail-middle-chunk"
TEARDOWN_FAULT = "mha/unregister_faults/teardown-second-unregister-fails"
LIBRARY_LINE = 'return RuntimeError(what + " failed with error " + rc)   # type: ignore[operator]'


def _library_where() -> str:
    path = CUDA_IMPLS / "pinlib" / "common.py"
    line = path.read_text().splitlines().index("        " + LIBRARY_LINE) + 1
    return f"{path}:{line}"


def _same_file(where: str, expected: str) -> bool:
    path, _, line = where.rpartition(":")
    want, _, want_line = expected.rpartition(":")
    return Path(path).resolve() == Path(want).resolve() and line == want_line


def test_a_raise_inside_a_wrapped_library_is_placed_at_the_library_line(
        by_id: dict[str, Scenario]) -> None:
    """The adapter's register calls the library's pin; the TypeError of the library's error
    path is error-reported at pinlib/common.py's line, not at the adapter's call."""
    impl = make_implementation(impl_spec("adapter_over_library_typeerror"), None, "generic")
    result = run_scenario(by_id[FAIL_MIDDLE], impl)
    reported = [v for v in result.violations if v.rule == "error-reported"]
    assert reported, result.as_dict()
    assert _same_file(reported[0].where, _library_where()), reported[0].where
    assert reported[0].code == LIBRARY_LINE


def test_a_teardown_typeerror_is_teardown_raised_despite_the_injected_fault(
        by_id: dict[str, Scenario]) -> None:
    """The scenario injects a teardown unregister failure, which excuses a teardown that
    raises to report it; a TypeError reports nothing: teardown-raised at the library line."""
    impl = make_implementation(impl_spec("adapter_over_library_typeerror"), None, "generic")
    result = run_scenario(by_id[TEARDOWN_FAULT], impl)
    raised = [v for v in result.violations if v.rule == "teardown-raised"]
    assert len(raised) == 1, result.as_dict()
    assert raised[0].message == ("teardown #1 of kv_buffer raised TypeError: can only "
                                 "concatenate str (not \"int\") to str")
    assert _same_file(raised[0].where, _library_where()), raised[0].where


def test_the_correct_adapter_passes_both(by_id: dict[str, Scenario]) -> None:
    """The twin reports with an f-string: its teardown raises RuntimeError for the injected
    failure (excused), keeps the range and the next teardown releases it."""
    impl = make_implementation(impl_spec("adapter_over_library"), None, "generic")
    for sid in (FAIL_MIDDLE, TEARDOWN_FAULT):
        result = run_scenario(by_id[sid], impl)
        assert result.verdict == "pass", result.as_dict()
