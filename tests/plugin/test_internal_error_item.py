"""A scenario item kvreg itself broke on fails as kvreg's, with the traceback and a request
for a report, not as a verdict on the code (pytester, in process: the supervisor's forked
workers see the monkeypatched checks)."""

from __future__ import annotations

from typing import Any

import pytest

# torch must already be imported here: pytester's in-process runs restore sys.modules.
import torch  # noqa: F401

from ..helpers.scenario_text import ABOVE_LIMIT, write_scenarios


def _project(pytester: pytest.Pytester) -> None:
    write_scenarios(pytester.path / "kv_scenarios" / "mla.toml", ABOVE_LIMIT)
    pytester.makeini("[pytest]\nkvreg_scenarios = kv_scenarios\n")


def test_an_internal_error_fails_the_item_as_kvregs(pytester: pytest.Pytester,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import kvreg.harness.cuda.world as cuda_world

    def check_run(record: Any) -> Any:
        raise ZeroDivisionError("kvreg divided by zero")

    monkeypatch.setattr(cuda_world, "check_run", check_run)
    _project(pytester)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "*scenario kv_scenarios/mla/above-limit: kvreg internal error during the checks of the "
        "run: ZeroDivisionError: kvreg divided by zero (this is a bug in kvreg, not in the code "
        "under test: please report it*",
        "Traceback (most recent call last):",
    ])


def test_without_the_crash_the_item_passes(pytester: pytest.Pytester) -> None:
    _project(pytester)
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=1)
