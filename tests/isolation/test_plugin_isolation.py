"""The pytest plugin's scenario items run in the same supervised workers as ``kvreg run``:
a run that did not complete fails its item with the same one-line reason, the limits are
``--kvreg-timeout`` / ``kvreg_timeout`` and ``--kvreg-memory-limit`` / ``kvreg_memory_limit``,
and every ``*.toml`` under the configured paths is collected (pytester projects)."""

from __future__ import annotations

import shutil

import pytest

# torch must already be imported here: pytester's in-process runs restore sys.modules.
import torch  # noqa: F401

from kvreg.harness.scenario import ScenarioError, load_paths

from ..helpers.paths import ISOLATION_IMPLS
from ..helpers.scenario_text import ONE_CHUNK, THREE_CHUNKS, VIRTUAL_MLA_POOL

AFTER_TWO = "during register of kv_buffer, after 2 cudaHostRegister calls"


def _project(pytester: pytest.Pytester, function: str, *ini: str) -> None:
    folder = pytester.mkdir("kv_scenarios")
    (folder / "pool.toml").write_text(VIRTUAL_MLA_POOL + THREE_CHUNKS + ONE_CHUNK)
    shutil.copy(ISOLATION_IMPLS / "misbehaving.py", pytester.path / "mypool.py")
    pytester.makeini("\n".join(["[pytest]", "kvreg_scenarios = kv_scenarios",
                                f"kvreg_impl = mypool.py:{function}",
                                "kvreg_teardown = mypool.py:teardown",
                                "kvreg_style = generic", *ini]) + "\n")


@pytest.mark.parametrize(("function", "what"), [
    ("register_os_exit", "the implementation ended the process with os._exit(0)"),
    ("register_sys_exit", "the implementation ended the process with sys.exit(3)"),
    ("register_segfault", "the implementation's process was killed by SIGSEGV"),
    ("register_keyboard_interrupt", "the implementation raised KeyboardInterrupt"),
])
def test_an_ended_run_fails_its_item_with_the_reason(pytester: pytest.Pytester,
                                                     function: str, what: str) -> None:
    _project(pytester, function)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    result.stdout.fnmatch_lines([f"*scenario kv_scenarios/pool/three-chunks did not complete: "
                                 f"{what}*{AFTER_TWO}*"])
    # one line per failure, not pytest's internals: no traceback, no thread dump
    assert "Traceback" not in out and "Fatal Python error" not in out
    assert "_pytest" not in out and "Current thread" not in result.stderr.str()


def test_time_limit_from_the_ini(pytester: pytest.Pytester) -> None:
    _project(pytester, "register_loops", "kvreg_timeout = 1.5")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-k", "three")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*did not complete: the implementation did not finish within "
                                 f"the time limit of 1.5 s (kvreg_timeout) {AFTER_TWO}*"])


def test_memory_limit_from_the_command_line(pytester: pytest.Pytester) -> None:
    _project(pytester, "register_allocates", "kvreg_memory_limit = 8G")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-k", "three",
                                           "--kvreg-memory-limit", "256M")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*did not complete: the implementation ran out of memory: the "
                                 "memory limit of 256 MiB (kvreg_memory_limit) was hit "
                                 f"{AFTER_TWO}*"])


def test_a_bad_limit_is_a_usage_error(pytester: pytest.Pytester) -> None:
    _project(pytester, "register", "kvreg_memory_limit = lots")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*kvreg_memory_limit: expected a size such as 512M*'lots'*"])


def test_the_correct_control_passes_in_the_worker(pytester: pytest.Pytester) -> None:
    _project(pytester, "register")
    pytester.runpytest("-p", "no:cacheprovider").assert_outcomes(passed=2)


@pytest.mark.parametrize(("text", "message"), [
    # a valid file whose table header has spaces: collected, not skipped
    (VIRTUAL_MLA_POOL + ONE_CHUNK.replace("[[scenario]]", "[[ scenario ]]"), None),
    (VIRTUAL_MLA_POOL + ONE_CHUNK.replace("[[scenario]]", "[[scenarios]]"),
     "*odd.toml: scenarios: expected one of the top-level fields*"),
    ("", "*odd.toml: format: expected 1 (the scenario format version)*"),
    (VIRTUAL_MLA_POOL + "[[scenario]\n", "*odd.toml: not valid TOML:*"),
])
def test_every_toml_file_is_collected(pytester: pytest.Pytester, text: str,
                                      message: str | None) -> None:
    _project(pytester, "register")
    (pytester.path / "kv_scenarios" / "odd.toml").write_text(text)
    result = pytester.runpytest("-p", "no:cacheprovider")
    if message is None:
        result.assert_outcomes(passed=3)
        return
    result.stdout.fnmatch_lines(["*invalid kvreg scenario file:*", message])
    # ... exactly kvreg run's message for the same file (its exit 2)
    with pytest.raises(ScenarioError) as loaded:
        load_paths([pytester.path / "kv_scenarios"])
    assert str(loaded.value) in result.stdout.str()
    assert result.ret == pytest.ExitCode.INTERRUPTED     # a collection error stops the run
    assert "Traceback" not in result.stdout.str()
