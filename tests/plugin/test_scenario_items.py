"""Scenario files as pytest items, as a downstream project configures them (pytester)."""

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


def _project(pytester: pytest.Pytester, impl: bool = False) -> None:
    write_scenarios(pytester.path / "kv_scenarios" / "mla.toml", ABOVE_LIMIT, FAIL_MIDDLE_CHUNK)
    ini = "[pytest]\nkvreg_scenarios = kv_scenarios\n"
    if impl:
        pytester.makepyfile(mypool=BYTE_OFFSET_IMPL)
        ini += "kvreg_impl = mypool.py:register\nkvreg_style = sglang\n"
    pytester.makeini(ini)


def test_custom_scenarios_collect_with_readable_ids(pytester: pytest.Pytester) -> None:
    _project(pytester)
    result = pytester.runpytest("-p", "no:cacheprovider", "--collect-only", "-q")
    result.stdout.fnmatch_lines(["kv_scenarios/mla.toml::kv_scenarios/mla/above-limit",
                                 "kv_scenarios/mla.toml::kv_scenarios/mla/fail-middle-chunk"])


def test_reference_passes_and_k_selects(pytester: pytest.Pytester) -> None:
    _project(pytester)
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=2)
    pytester.runpytest("-p", "no:cacheprovider", "-k", "fail-middle").assert_outcomes(passed=1)
    pytester.runpytest("-p", "no:cacheprovider", "-m", "kvreg_scenario").assert_outcomes(
        passed=2)


def test_user_implementation_failure_message(pytester: pytest.Pytester) -> None:
    _project(pytester, impl=True)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([
        "*scenario kv_scenarios/mla/above-limit failed (2 violation(s))*",
        "*[[]transfer-failed] page 238 of kv_buffer*spans registrations at offset 1073741824*",
        "*[[]seams-aligned] a seam between two registrations of kv_buffer lies at offset "
        "1073741824*cuts copy page 238*"])


def test_command_line_options_override_the_ini(pytester: pytest.Pytester) -> None:
    _project(pytester)
    pytester.makepyfile(mypool=BYTE_OFFSET_IMPL)
    result = pytester.runpytest("-p", "no:cacheprovider", "--kvreg-impl", "mypool.py:register")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["kvreg scenarios: *implementation: mypool.py:register*"])


def test_bundled_catalog_can_be_selected(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nkvreg_scenarios = bundled\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "-k", "mla and page_first_direct and "
                                "fail-middle and not fp8")
    result.assert_outcomes(passed=1)


def test_invalid_file_is_a_collection_error_naming_file_and_field(
        pytester: pytest.Pytester) -> None:
    _project(pytester)
    write_scenarios(pytester.path / "kv_scenarios" / "bad.toml", ABOVE_LIMIT,
                    FAIL_MIDDLE_CHUNK.replace('expect = "register-error"', 'expect = "sucess"'))
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.stdout.fnmatch_lines([
        "*invalid kvreg scenario file:*",
        "*bad.toml: scenario[[]1] (fail-middle-chunk): expect: expected one of*'sucess'*"])
    assert result.ret != 0
    assert "Traceback" not in result.stdout.str()


def test_scenarios_run_under_xdist(pytester: pytest.Pytester) -> None:
    _project(pytester)
    pytester.runpytest("-p", "no:cacheprovider", "-p", "no:benchmark", "-n", "2"
                       ).assert_outcomes(passed=2)


def test_pool_and_fault_fixtures(pytester: pytest.Pytester) -> None:
    pytester.makepyfile('''
import pytest
from kvreg.harness.cuda import reference

def test_pool(kvreg_pool, kvreg_faults, fake_cudart):
    pool = kvreg_pool("mla", layout="page_first_direct", layer_num=61, kv_lora_rank=512,
                      qk_rope_head_dim=64, dtype="bfloat16", page_size=64, page_num=600)
    assert pool.granularities() == [4497408]
    kvreg_faults.arm("cudart.cudaHostRegister", nth=2, error=2)
    (buf, spec), = list(pool)
    with pytest.raises(reference.RegistrationError):
        reference.register(fake_cudart.torch, buf.data_ptr(), spec.nbytes,
                           granularity=spec.granularity, chunk_limit=1 << 30)
    assert fake_cudart.live_registrations() == []
    assert kvreg_faults.seed == 7
''')
    pytester.runpytest("-p", "no:cacheprovider", "--kvreg-seed", "7").assert_outcomes(passed=1)


def test_report_header_names_seed(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "--kvreg-seed", "3")
    result.stdout.fnmatch_lines(["kvreg *: backend fake, device profile h200-r580, fault seed 3*"])
