"""kvreg never blames the code under test for kvreg (ARCHITECTURE.md#public-contract:
kvreg's own failures are never the user's): a NULL pointer the real API accepts is judged,
not crashed on; an exception inside kvreg is the ``internal-error`` verdict with its
traceback and exit status 3; an API the fake does not model is an ``error`` naming it;
kvreg's own calls never spend the implementation's call budget."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from kvreg.harness.cli.main import main
from kvreg.harness.run.core import run_scenario
from kvreg.harness.run.implementation import make_implementation
from kvreg.harness.run.result import ScenarioResult
from kvreg.harness.scenario import Scenario, load_paths

from ..helpers.paths import impl_spec

MHA = "mha/page_first_direct"
BELOW = f"{MHA}/below-limit"
EMPTY = f"{MHA}/empty-pool"


def _rules(vs: Any) -> list[str]:
    return [v.rule for v in vs]


# -- NULL: ctypes hands NULL over as None (docs/cuda-runtime.md §3, §9) ------------------------

def test_null_handles_are_judged_not_crashed_on(by_id: dict[str, Scenario]) -> None:
    """cudaHostUnregister(NULL) through ctypes (recorded as None) is a warning: the runtime
    answers 1 and releases nothing. Before, the checks raised TypeError on int(None)."""
    impl = make_implementation(impl_spec("ctypes_null_handles"), None, "ctypes")
    empty = run_scenario(by_id[EMPTY], impl)
    assert empty.verdict == "pass", empty.as_dict()
    (w,) = empty.warnings
    assert w.rule == "unregister-null"
    assert w.message == ("call #1 unregisters NULL, which is never registered: the runtime "
                         "answers 1 cudaErrorInvalidValue and nothing is released")
    assert w.where.endswith("ctypes_null_handles.py:54")
    full = run_scenario(by_id[BELOW], impl)
    assert (full.verdict, full.warnings) == ("pass", []), full.as_dict()


def test_handles_lost_to_null_leak_every_chunk(by_id: dict[str, Scenario]) -> None:
    """The broken twin keeps NULL handles for real chunks: each chunk is a leak, each NULL
    unregister a warning, and nothing of kvreg's crashes."""
    impl = make_implementation(impl_spec("ctypes_null_handles_lost"), None, "ctypes")
    result = run_scenario(by_id[BELOW], impl)
    assert result.verdict == "fail"
    assert set(_rules(result.violations)) == {"leak"}
    assert result.violations[0].message == ("chunk [kv_buffer+0x0, +349175808) was never "
                                            "released by teardown")
    assert _rules(result.warnings) == ["unregister-null"]
    assert result.warnings[0].count >= 1


# -- internal-error: an exception inside kvreg -----------------------------------------------

def _broken_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    import kvreg.harness.cuda.world as cuda_world

    def check_run(record: Any) -> Any:
        raise KeyError("kvreg's own bug")

    monkeypatch.setattr(cuda_world, "check_run", check_run)


def test_a_crash_in_kvregs_checks_is_an_internal_error_with_exit_3(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Table, JSON, JUnit and exit status say it is kvreg's: the traceback, a request for a
    report, a cause with no line of the user's code; exit 3, not 1, even with a baseline."""
    _broken_checks(monkeypatch)
    report, junit, baseline = tmp_path / "r.json", tmp_path / "j.xml", tmp_path / "base.txt"
    baseline.write_text("")
    code = main(["run", "--impl", impl_spec("ctypes_null_handles"), "--style", "ctypes",
                 "-k", BELOW, "--json", str(report), "--junit-xml", str(junit),
                 "--baseline", str(baseline)])
    out, err = capsys.readouterr()
    assert code == 3
    assert f"{BELOW}  INTERNAL-ERROR  kvreg internal error during the checks of the run: " \
           "KeyError: \"kvreg's own bug\" (this is a bug in kvreg" in out
    assert "KeyError: \"kvreg's own bug\"" in out.split("INTERNAL-ERROR", 1)[1]   # traceback
    assert "0 passed, 0 failed, 1 errors (1 of them kvreg internal errors)" in out
    assert "please report it" in err and "exit 3" in err
    doc = json.loads(report.read_text())
    assert doc["summary"]["errors"] == doc["summary"]["internal_errors"] == 1
    (s,) = doc["scenarios"]
    assert s["verdict"] == "internal-error" and s["violations"] == []
    assert "Traceback (most recent call last)" in s["traceback"]
    assert "in check_run" in s["traceback"]
    (cause,) = doc["causes"]
    assert (cause["rule"], cause["where"], cause["code"]) == ("internal-error", "", "")
    case = ET.parse(junit).getroot().find("testsuite/testcase/error")
    assert case is not None and case.get("type") == "kvreg.internal-error"
    assert "Traceback" in (case.text or "")


def test_the_same_run_without_the_crash_passes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The twin of the test above: exit 0, no internal error counted."""
    report = tmp_path / "r.json"
    code = main(["run", "--impl", impl_spec("ctypes_null_handles"), "--style", "ctypes",
                 "-k", BELOW, "--json", str(report)])
    capsys.readouterr()
    assert code == 0
    assert "internal_errors" not in json.loads(report.read_text())["summary"]


def test_an_exception_that_escapes_the_runner_in_a_worker_is_kvregs(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The worker's last resort: an Exception out of run_scenario is kvreg's (the runner
    judges every one the implementation raises); before, it read "the implementation
    raised"."""
    import kvreg.harness.run.worker as worker

    def run_scenario(*args: Any, **kwargs: Any) -> ScenarioResult:
        raise AttributeError("kvreg lost its record")

    monkeypatch.setattr(worker, "run_scenario", run_scenario)
    code = main(["run", "-k", BELOW, "--json", "-"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 3
    (s,) = doc["scenarios"]
    assert s["verdict"] == "internal-error"
    assert "the implementation" not in s["reason"]
    assert s["reason"].startswith("kvreg internal error while kvreg set the run up: "
                                  "AttributeError: kvreg lost its record")


# -- an API the fake does not model ----------------------------------------------------------

@pytest.mark.parametrize("function", ["register", "register_probe"])
def test_an_api_the_fake_does_not_model_is_an_error_naming_it(
        by_id: dict[str, Scenario], function: str) -> None:
    """Raised out of register (before: fail, unexpected-error) or caught as a probe (before:
    pass on a path the real machine may not take): an error naming the API and the row."""
    impl = make_implementation(impl_spec("ctypes_device_props", function), None, "ctypes")
    result = run_scenario(by_id[BELOW], impl)
    assert (result.verdict, result.violations) == ("error", [])
    assert result.reason.startswith("kvreg cannot judge this run: the code called "
                                    "cudaGetDeviceProperties, which kvreg's fake does not "
                                    "model; to model it, add a row in docs/cuda-runtime.md")
    assert "SPEC_SECTION entry in fakes/cuda/coverage.py" in result.reason


def test_the_code_s_own_exception_stays_a_fail(by_id: dict[str, Scenario]) -> None:
    """The contrast: an exception of the code's own (TypeError for a bad granularity) is
    still the code's (rejected-wrong-error), not kvreg's."""
    impl = make_implementation(impl_spec("type_error"), None, "generic")
    result = run_scenario(by_id["mla/page_first_direct/granularity-above-limit"], impl)
    assert result.verdict == "fail"
    assert "rejected-wrong-error" in _rules(result.violations)


# -- the call budget counts the implementation's calls only ----------------------------------

BUDGET_CUDA = '''format = 1
[pool]
type = "mla"
params = {{ layout = "page_first_direct", layer_num = 61, kv_lora_rank = 512, \
qk_rope_head_dim = 64, dtype = "bfloat16", page_size = 64 }}
[defaults]
chunk_gb = 1
[[scenario]]
name = "budget"
guards = "kvreg's own copy calls never spend the implementation's call budget"
pages = 600
call_budget = {budget}
'''

BUDGET_MOONCAKE = '''format = 1
[pool]
type = "fastdeploy"
params = {{ num_layers = 2, head_num = 1, head_dim = 128, dtype = "bfloat16", page_size = 4 }}
[defaults]
target = "mooncake"
[[scenario]]
name = "budget"
guards = "kvreg's own store calls never spend the implementation's call budget"
pages = 64
mooncake = {{ mc_max_mr_size = 999424 }}
call_budget = {budget}
'''


def _budget_run(tmp_path: Path, text: str, budget: int) -> ScenarioResult:
    path = tmp_path / f"b{budget}.toml"
    path.write_text(text.format(budget=budget))
    (sc,) = load_paths([path])
    return run_scenario(sc, make_implementation(), keep_trace=True)


@pytest.mark.parametrize(("text", "own"), [
    (BUDGET_CUDA, ("cudaHostRegister", "cudaHostUnregister")),
    (BUDGET_MOONCAKE, ("register_buffer", "unregister_buffer")),
], ids=["cuda", "mooncake"])
def test_kvregs_own_calls_never_spend_the_call_budget(tmp_path: Path, text: str,
                                                      own: tuple[str, ...]) -> None:
    """A budget of exactly the reference's own calls passes, though kvreg's copy step makes
    more calls after register (before: stopped in kvreg's step, the user's line blamed);
    one call less stops it, naming the calls it made."""
    first = _budget_run(tmp_path, text, 1 << 20)
    assert first.verdict == "pass", first.as_dict()
    lines = first.trace_text.splitlines()
    made = sum(1 for line in lines if any(f".{api}(" in line for api in own))
    assert 2 <= made < len(lines)          # kvreg's own calls are in the trace too
    exact = _budget_run(tmp_path, text, made)
    assert exact.verdict == "pass", exact.as_dict()
    short = _budget_run(tmp_path, text, made - 1)
    assert _rules(short.violations)[0] == "call-budget"
    assert short.violations[0].message.startswith(f"stopped after {made} ")
