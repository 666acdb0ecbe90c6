"""Without Mooncake the tier skips and says what to install; --kvreg-require-hw fails it.

Runs the tier's own conftest (tests/mooncake_real/conftest.py) in a pytester project whose
``missing_reason`` reports the wheel missing, so this holds on every machine.
"""

from __future__ import annotations

from pathlib import Path

import pytest

CONFTEST = Path(__file__).parents[1] / "mooncake_real" / "conftest.py"
REASON = "the Mooncake wheel is not installed (pip install x)"


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    text = CONFTEST.read_text()
    text += f"\n\ndef missing_reason() -> str:\n    return {REASON!r}\n"
    pytester.makeconftest(text)
    pytester.makepyfile(test_tier='''
import pytest
pytestmark = pytest.mark.kvreg_mooncake_real

def test_needs_the_store(master):
    raise AssertionError("must not run without the wheel")
''')
    return pytester


def test_missing_wheel_is_a_skip_with_the_reason(project: pytest.Pytester) -> None:
    result = project.runpytest("-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*kvreg_mooncake_real: the Mooncake wheel is not installed*"])


def test_require_hw_makes_it_a_failure(project: pytest.Pytester) -> None:
    result = project.runpytest("--kvreg-require-hw", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*--kvreg-require-hw is set*"])
