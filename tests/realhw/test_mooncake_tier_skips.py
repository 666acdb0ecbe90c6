"""Outside its namespace the tier skips naming the launcher; without Mooncake it skips and says
what to install; --kvreg-require-hw fails either.

Runs the tier's own conftest (tests/mooncake_real/conftest.py) in a pytester project whose
``missing_reason`` (and, for the in-namespace cases, ``netns_reason``) are stand-ins, so this
holds on every machine. The outside-the-namespace cases clear the launcher's environment
variable, so they hold inside the namespace too.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kvreg.realhw import mooncake_netns

CONFTEST = Path(__file__).parents[1] / "mooncake_real" / "conftest.py"
MASTERS = Path(__file__).parents[1] / "helpers" / "mooncake_masters.py"
REASON = "the Mooncake wheel is not installed (pip install x)"
LAUNCHER = "*kvreg_mooncake_real: the real Mooncake master and store listen on every " \
           "interface; they run only in the private network namespace that " \
           "`bash .ci/mooncake-real PYTHON test` makes*"
TIER_TEST = '''
import pytest
pytestmark = pytest.mark.kvreg_mooncake_real

def test_needs_the_store(master):
    raise AssertionError("must not run here")
'''


@pytest.fixture(autouse=True)
def outside(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No namespace recorded: ``netns_reason`` answers as it does in the main suite."""
    monkeypatch.delenv(mooncake_netns.ENV, raising=False)
    monkeypatch.delenv(mooncake_netns.ENV_UNAVAILABLE, raising=False)
    mooncake_netns.netns_reason.cache_clear()
    yield
    mooncake_netns.netns_reason.cache_clear()


def _project(pytester: pytest.Pytester, *, wheel: str | None, inside: bool,
             conftest: str | None = None) -> pytest.Pytester:
    text = conftest if conftest is not None else CONFTEST.read_text()
    # the conftest's helpers module, beside it in the project (tests/helpers/ is not there)
    text = text.replace("from ..helpers.mooncake_masters import", "from mooncake_masters import")
    pytester.makepyfile(mooncake_masters=MASTERS.read_text())
    pytester.syspathinsert()
    text += f"\n\ndef missing_reason() -> str | None:\n    return {wheel!r}\n"
    if inside:
        text += "\n\ndef netns_reason() -> None:\n    return None\n"
    pytester.makeconftest(text)
    pytester.makepyfile(test_tier=TIER_TEST)
    return pytester


def test_outside_the_namespace_it_skips_naming_the_launcher(pytester: pytest.Pytester) -> None:
    project = _project(pytester, wheel=None, inside=False)     # everything installed
    result = project.runpytest("-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines([LAUNCHER])


def test_the_launchers_failure_is_in_the_reason(pytester: pytest.Pytester,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(mooncake_netns.ENV_UNAVAILABLE, "unshare -rn: Operation not permitted")
    project = _project(pytester, wheel=None, inside=False)
    result = project.runpytest("-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*could not make one: unshare -rn: Operation not permitted*"])


def test_outside_the_namespace_require_hw_makes_it_a_failure(pytester: pytest.Pytester) -> None:
    project = _project(pytester, wheel=None, inside=False)
    result = project.runpytest("--kvreg-require-hw", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*.ci/mooncake-real PYTHON test* (--kvreg-require-hw is set)*"])
    result.stdout.no_fnmatch_line("*must not run here*")


def test_a_conftest_that_ignores_the_namespace_is_caught(pytester: pytest.Pytester) -> None:
    """The broken twin: a tier gate that asks only for the wheel runs the test outside."""
    text = CONFTEST.read_text()
    assert "return netns_reason() or missing_reason()" in text
    broken = text.replace("return netns_reason() or missing_reason()", "return missing_reason()")
    project = _project(pytester, wheel=None, inside=False, conftest=broken)
    # the stand-in master fixture: the real one must not even be tried outside
    pytester.makepyfile(test_tier=TIER_TEST.replace("(master)", "()"))
    result = project.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*must not run here*"])


def test_inside_a_missing_wheel_is_a_skip_with_the_reason(pytester: pytest.Pytester) -> None:
    project = _project(pytester, wheel=REASON, inside=True)
    result = project.runpytest("-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*kvreg_mooncake_real: the Mooncake wheel is not installed*"])


def test_inside_require_hw_makes_a_missing_wheel_a_failure(pytester: pytest.Pytester) -> None:
    project = _project(pytester, wheel=REASON, inside=True)
    result = project.runpytest("--kvreg-require-hw", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*not installed*--kvreg-require-hw is set*"])
