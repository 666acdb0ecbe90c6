"""``kvreg run`` survives every way an implementation can end its process.

Each implementation under ``impls/misbehaving.py`` registers two chunks of ``kv_buffer`` and
then ends the run its own way; the verdict must be ``error`` (never ``pass``) with a reason
that names what happened, in which step and buffer, and after how many calls; the run must
go on to the next scenario, exit 1, and write a complete JSON report.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from ..helpers.kvreg_cli import run_json, run_kvreg
from ..helpers.paths import isolation_spec
from ..helpers.scenario_text import ONE_CHUNK, THREE_CHUNKS, scenario_file

AFTER_TWO = "during register of kv_buffer, after 2 cudaHostRegister calls"
AFTER_ONE = "during register of kv_buffer, after 1 cudaHostRegister call"

CASES: list[tuple[str, tuple[str, ...], str]] = [
    ("register_sys_exit", (), "the implementation ended the process with sys.exit(3)"),
    ("register_os_exit", (), "the implementation ended the process with os._exit(0)"),
    ("register_sigkill", (), "the implementation's process was killed by SIGKILL (Killed)"),
    ("register_segfault", (),
     "the implementation's process was killed by SIGSEGV (Segmentation fault)"),
    ("register_keyboard_interrupt", (), "the implementation raised KeyboardInterrupt"),
    ("register_loops", ("--timeout", "1.5"),
     "the implementation did not finish within the time limit of 1.5 s (--timeout)"),
    ("register_allocates", ("--memory-limit", "256M"),
     "the implementation ran out of memory: the memory limit of 256 MiB (--memory-limit) "
     "was hit"),
]


def check_complete(doc: Any) -> dict[str, dict[str, Any]]:
    """The report is the contract's JSON, complete: summary counts match the scenarios."""
    assert set(doc) == {"summary", "contract", "causes", "hints", "scenarios"}
    summary, scenarios = doc["summary"], doc["scenarios"]
    # every erroring or failing scenario is under a cause (an error: rule "error")
    if any(s["verdict"] in ("fail", "error") for s in scenarios):
        assert doc["causes"], doc
    assert summary["total"] == len(scenarios)
    names = {"pass": "passed", "fail": "failed", "error": "errors", "skip": "skipped"}
    for verdict, key in names.items():
        assert summary[key] == sum(1 for s in scenarios if s["verdict"] == verdict)
    for s in scenarios:
        assert bool(s["violations"]) == (s["verdict"] == "fail"), s
        if s["verdict"] in ("error", "skip"):
            assert s["reason"] and "\n" not in s["reason"], s
    return {s["id"]: s for s in scenarios}


@pytest.mark.parametrize(("function", "options", "what"), CASES, ids=[c[0] for c in CASES])
def test_an_ended_run_is_an_error_that_says_how_far_it_got(tmp_path: Path, function: str,
                                                            options: tuple[str, ...],
                                                            what: str) -> None:
    scenario_file(tmp_path, THREE_CHUNKS, ONE_CHUNK)
    rc, doc, _, stderr = run_json(str(tmp_path), "--style", "generic", "--impl",
                               isolation_spec(function), "--teardown", isolation_spec("teardown"),
                               *options)
    assert rc == 1, stderr
    assert "Traceback" not in stderr
    by_id = check_complete(doc)
    three, one = by_id["pool/three-chunks"], by_id["pool/one-chunk"]
    # the run went on after the first scenario ended its worker: both have a verdict
    assert three["verdict"] == one["verdict"] == "error"
    assert three["reason"] == f"{what} {AFTER_TWO}"
    assert one["reason"] == f"{what} {AFTER_ONE}"


def test_an_endless_loop_of_runtime_calls_is_stopped_by_the_time_limit(tmp_path: Path) -> None:
    """Slow enough never to spend the call budget: the time limit stops it, and the reason
    counts the calls the loop made after the two chunks."""
    scenario_file(tmp_path, THREE_CHUNKS)
    rc, doc, _, _ = run_json(str(tmp_path), "--style", "generic", "--timeout", "1.5",
                          "--impl", isolation_spec("register_loops_calling"),
                          "--teardown", isolation_spec("teardown"))
    assert rc == 1
    (s,) = check_complete(doc).values()
    m = re.fullmatch(r"the implementation did not finish within the time limit of 1\.5 s "
                     r"\(--timeout\) during register of kv_buffer, after (\d+) "
                     r"cudaHostRegister calls", s["reason"])
    assert m is not None, s["reason"]
    assert int(m.group(1)) > 2


def test_raise_and_return_are_judged_by_the_checks(tmp_path: Path) -> None:
    """An ordinary exception is the implementation's answer, judged as before (fail); the
    correct control passes: isolation changes no verdict of a run that completes."""
    scenario_file(tmp_path, THREE_CHUNKS, ONE_CHUNK)
    common = (str(tmp_path), "--style", "generic", "--teardown", isolation_spec("teardown"))
    rc, doc, _, _ = run_json(*common, "--impl", isolation_spec("register_raises"))
    assert rc == 1
    by_id = check_complete(doc)
    assert {s["verdict"] for s in by_id.values()} == {"fail"}
    assert "gives up after two chunks" in by_id["pool/three-chunks"]["violations"][0]["message"]
    rc, doc, _, _ = run_json(*common, "--impl", isolation_spec("register"))
    assert rc == 0
    assert {s["verdict"] for s in check_complete(doc).values()} == {"pass"}


def test_a_dying_worker_with_two_jobs_is_replaced(tmp_path: Path) -> None:
    """-j 2: the worker that dies on the big buffer is replaced; every other scenario,
    before and after it, passes (no BrokenProcessPool)."""
    small = [ONE_CHUNK.replace("one-chunk", f"small-{i}") for i in range(4)]
    scenario_file(tmp_path, small[0], small[1], THREE_CHUNKS, small[2], small[3])
    rc, doc, _, stderr = run_json(str(tmp_path), "--style", "generic", "-j", "2",
                               "--impl", isolation_spec("register_dies_when_chunked"),
                               "--teardown", isolation_spec("teardown"))
    assert rc == 1 and "Traceback" not in stderr
    by_id = check_complete(doc)
    assert [s["id"] for s in doc["scenarios"]] == [
        "pool/small-0", "pool/small-1", "pool/three-chunks", "pool/small-2", "pool/small-3"]
    assert by_id.pop("pool/three-chunks")["reason"] == (
        f"the implementation ended the process with os._exit(0) {AFTER_TWO}")
    assert {s["verdict"] for s in by_id.values()} == {"pass"}


def test_what_the_implementation_prints_stays_out_of_the_json(tmp_path: Path) -> None:
    scenario_file(tmp_path, ONE_CHUNK)
    rc, doc, _, stderr = run_json(str(tmp_path), "--style", "generic",
                               "--impl", isolation_spec("register_chatty"),
                               "--teardown", isolation_spec("teardown"))
    assert rc == 0
    assert check_complete(doc)["pool/one-chunk"]["verdict"] == "pass"
    assert "registering" in stderr


def test_in_process_debugging_reports_the_same_reasons(tmp_path: Path) -> None:
    """``--in-process`` runs the implementation in kvreg's own process (for a debugger):
    the exceptions and the time limit are reported as a worker reports them."""
    scenario_file(tmp_path, THREE_CHUNKS)
    common = (str(tmp_path), "--style", "generic", "--in-process",
              "--teardown", isolation_spec("teardown"))
    rc, doc, _, _ = run_json(*common, "--impl", isolation_spec("register_sys_exit"))
    assert rc == 1
    assert check_complete(doc)["pool/three-chunks"]["reason"] == (
        f"the implementation ended the process with sys.exit(3) {AFTER_TWO}")
    rc, doc, _, _ = run_json(*common, "--timeout", "1", "--impl", isolation_spec("register_loops"))
    assert rc == 1
    assert check_complete(doc)["pool/three-chunks"]["reason"] == (
        f"the implementation did not finish within the time limit of 1 s (--timeout) "
        f"{AFTER_TWO}")


@pytest.mark.parametrize(("args", "words"), [
    (("--in-process", "-j", "2"), "--in-process runs one scenario at a time"),
    (("--timeout", "0"), "--timeout: expected a positive number of seconds; got '0'"),
    (("--memory-limit", "lots"), "--memory-limit: expected a size such as 512M"),
])
def test_bad_limit_options_are_usage_errors(tmp_path: Path, args: tuple[str, ...],
                                            words: str) -> None:
    scenario_file(tmp_path, ONE_CHUNK)
    proc = run_kvreg("run", str(tmp_path), *args)
    assert proc.returncode == 2
    assert words in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stdout == ""
