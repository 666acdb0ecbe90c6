"""The end-state rules in the pytest plugin: same rules, same messages as ``kvreg run``,
warnings in pytest's warnings summary, pinning from the ini file or the command line."""

from __future__ import annotations

from pathlib import Path

import pytest

# torch must already be imported here: pytester's in-process runs restore sys.modules.
import torch  # noqa: F401

IMPLS = Path(__file__).resolve().parents[1] / "cuda_target" / "impls"
SCENARIO = '''
format = 1
[pool]
type = "mla"
params = { layout = "page_first_direct", layer_num = 61, kv_lora_rank = 512, \
qk_rope_head_dim = 64, dtype = "bfloat16", page_size = 64 }
[defaults]
chunk_gb = 1
pages = 477
[[scenario]]
name = "above-limit"
guards = "every byte of the pool is registered (kvreg issue: a do-nothing register passed)"
[[scenario]]
name = "fail-first-chunk"
guards = "the raised error names the CUDA error (sglang PR #38509 TypeError)"
expect = "register-error"
faults = [{ point = "cudart.cudaHostRegister", nth = 1, error = "cudaErrorMemoryAllocation" }]
'''


def _project(pytester: pytest.Pytester, impl: str | None, extra: str = "") -> None:
    pytester.mkdir("kv_scenarios")
    (pytester.path / "kv_scenarios" / "mla.toml").write_text(SCENARIO)
    ini = "[pytest]\nkvreg_scenarios = kv_scenarios\n" + extra
    if impl is not None:
        ini += f"kvreg_impl = {IMPLS / impl}.py:register\nkvreg_style = sglang\n"
    pytester.makeini(ini)


def test_do_nothing_fails_with_registered(pytester: pytest.Pytester) -> None:
    _project(pytester, "do_nothing")
    result = pytester.runpytest("-p", "no:cacheprovider")
    # no call is made, so the fault never fires: both scenarios expect a registered pool
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines([
        "*[[]registered] register() of kv_buffer returned normally but registered none of "
        "its 2145263616 bytes*"])


@pytest.mark.parametrize("how", ["ini", "option"])
def test_pinning_optional_passes_it(pytester: pytest.Pytester, how: str) -> None:
    _project(pytester, "do_nothing", "kvreg_pinning = optional\n" if how == "ini" else "")
    args = ["-p", "no:cacheprovider"] + (["--kvreg-pinning", "optional"] if how == "option"
                                         else [])
    pytester.runpytest(*args).assert_outcomes(passed=2)


def test_masked_error_fails_with_error_reported(pytester: pytest.Pytester) -> None:
    _project(pytester, "masked_error")
    result = pytester.runpytest("-p", "no:cacheprovider", "-k", "fail-first")
    result.assert_outcomes(failed=1, deselected=1)
    result.stdout.fnmatch_lines([
        "*[[]error-reported] register() of kv_buffer raised TypeError*from masked_error.py:*"
        "instead of reporting cudaErrorMemoryAllocation (2, out of memory)*"])


def test_warnings_of_a_passing_scenario_reach_the_summary(pytester: pytest.Pytester) -> None:
    _project(pytester, "recovering_retry")
    result = pytester.runpytest("-p", "no:cacheprovider", "-k", "fail-first")
    result.assert_outcomes(passed=1, deselected=1)
    result.stdout.fnmatch_lines([
        "*KvregScenarioWarning: kv_scenarios/mla/fail-first-chunk: [[]recovered] cudaHostRegister("
        "kv_buffer+0x0, 1070383104) (call #1) returned 2 cudaErrorMemoryAllocation*"])


def test_summary_leads_with_the_causes_and_the_pinning_hint(pytester: pytest.Pytester) -> None:
    """The plugin's summary groups the failures as ``kvreg run`` does: the rule, the line of
    the implementation (do_nothing.py's ``def register``), how many scenarios; and the
    hint that names --pinning optional, said once for both scenarios."""
    _project(pytester, "do_nothing")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=2)
    source = (IMPLS / "do_nothing.py").read_text().splitlines()
    line = next(i for i, text in enumerate(source, 1) if text.startswith("def register("))
    result.stdout.fnmatch_lines([
        "*= kvreg causes =*",
        "causes (1, most frequent first):",
        f"      2 scenario(s)  [[]registered]  *do_nothing.py:{line}: def register(*",
        "        e.g. kv_scenarios/mla/above-limit: register() of kv_buffer returned normally*",
        "hint: 2 scenario(s) fail only because register() returned normally and pinned "
        "nothing.*--pinning optional*"])
    assert result.stdout.str().count("hint: ") == 1


def test_no_causes_section_when_everything_passes(pytester: pytest.Pytester) -> None:
    _project(pytester, None)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    assert "kvreg causes" not in result.stdout.str()
