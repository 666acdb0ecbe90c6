"""The ``ctypes`` and ``driver`` styles: implementations that reach CUDA by themselves.

The two examples of ``examples/runtime_doors`` (libcudart through ctypes, as current vLLM
does, and ``cuMemHostRegister`` through cuda-python's driver API) run over bundled scenarios
and pass; copies of them with a planted bug fail on the rule that bug breaks, through either
door (the checks read the driver twin of each runtime call, docs/cuda-runtime.md §2.1).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvreg.harness.run.core import run_scenario
from kvreg.harness.run.implementation import ImplementationError, make_implementation

ROOT = Path(__file__).resolve().parents[2]
MLA = "mla/page_first_direct"
DOORS = {"ctypes": "ctypes_register", "driver": "driver_register"}
PASSING = [f"{MLA}/below-limit", f"{MLA}/above-limit", f"{MLA}/fail-first-chunk",
           f"{MLA}/fail-middle-chunk", f"{MLA}/fail-during-rollback",
           f"{MLA}/fail-during-teardown", "mha/layer_first/over-ceiling-r580",
           f"{MLA}/granularity-above-limit"]
# text substitutions that plant a bug in a copy of an example
BUGS = {
    "byte_offset_seams": ("    step = chunk_limit - chunk_limit % unit",
                          "    step = chunk_limit"),
    "no_rollback": ("            failures = _release(",
                    "            failures = [] if True else _release("),
}


def _example(style: str) -> Path:
    return ROOT / "examples" / "runtime_doors" / f"{DOORS[style]}.py"


def _impl(path: Path, style: str):  # type: ignore[no-untyped-def]
    return make_implementation(f"{path}:register", f"{path}:teardown", style)


def _planted(tmp_path: Path, style: str, bug: str) -> Path:
    old, new = BUGS[bug]
    text = _example(style).read_text()
    assert old in text
    path = tmp_path / f"{style}_{bug}.py"
    path.write_text(text.replace(old, new))
    return path


@pytest.mark.parametrize("style", sorted(DOORS))
@pytest.mark.parametrize("sid", PASSING)
def test_example_passes(style: str, sid: str, by_id) -> None:  # type: ignore[no-untyped-def]
    result = run_scenario(by_id[sid], _impl(_example(style), style), keep_trace=True)
    assert result.verdict == "pass", result.violations
    if result.calls:
        face = "ctypes" if style == "ctypes" else "driver"
        assert f"#1 {face}." in result.trace_text or f" {face}." in result.trace_text


@pytest.mark.parametrize("style", sorted(DOORS))
@pytest.mark.parametrize(("bug", "sid", "rule", "words"), [
    ("byte_offset_seams", "regressions/cuda_byte_offset_seams/page-first-1gib-chunks",
     "transfer-failed", "spans registrations at offset 1073741824"),
    ("no_rollback", "regressions/cuda_no_rollback/second-chunk-out-of-memory",
     "not-rolled-back", "no rollback"),
])
def test_planted_bug_is_caught_through_either_door(
        style: str, bug: str, sid: str, rule: str, words: str, by_id,  # type: ignore[no-untyped-def]
        tmp_path: Path) -> None:
    result = run_scenario(by_id[sid], _impl(_planted(tmp_path, style, bug), style))
    assert result.verdict == "fail"
    first = result.violations[0]
    assert first.rule == rule and words in first.message, result.violations


def test_unknown_style_names_the_door_styles() -> None:
    with pytest.raises(ImplementationError, match="ctypes, driver"):
        make_implementation(f"{_example('ctypes')}:register", None, "cffi")


# -- error-pending reads the libcudart instance the ctypes door loads ------------------------

IMPLS = ROOT / "tests" / "cuda_target" / "impls"
TRANSIENT = "mla/persistent_and_transient/transient-middle-chunk"


@pytest.mark.parametrize(("style", "broken", "correct"), [
    ("ctypes", "ctypes_retry_undrained", "ctypes_retry_drained"),
    ("driver", "driver_fallback_undrained", "driver_fallback_drained"),
])
@pytest.mark.parametrize("sid", [TRANSIENT, f"{MLA}/fail-middle-chunk"])
def test_recovered_failure_left_in_libcudart_is_pending(  # type: ignore[no-untyped-def]
        style: str, broken: str, correct: str, sid: str, by_id) -> None:
    """A recovered cudaHostRegister failure stays in the libcudart instance that made the
    call (docs/cuda-runtime.md §6); ctypes code has cudaGetLastError on that handle, so
    leaving it is a failure, in the ctypes style and in a driver-style runtime fallback."""
    result = run_scenario(by_id[sid], _impl(IMPLS / f"{broken}.py", style))
    assert [v.rule for v in result.violations] == ["error-pending"], result.violations
    assert result.first_violation.startswith(
        "after register returned, libcudart's runtime still holds cudaError")
    assert result.first_violation.endswith(
        "drain it with cudaGetLastError through the same runtime")
    good = run_scenario(by_id[sid], _impl(IMPLS / f"{correct}.py", style))
    assert good.verdict == "pass", good.violations
    assert [w.rule for w in good.warnings] in (["recovered"], []), good.warnings
