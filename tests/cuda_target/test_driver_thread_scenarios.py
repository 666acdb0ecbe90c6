"""Driver-style code on a worker thread with no current context (docs/cuda-runtime.md §13.4).

The bundled ``regressions/cuda_driver_worker_thread`` scenarios call register and teardown on
fresh threads. cuda.h: the memory calls give CUDA_ERROR_INVALID_CONTEXT (201) on a thread with
no current context [DOC]; the runtime makes the primary context current on the thread it is
called on (CUDA Runtime API, "Context Management") [DOC]; such failures on registration and
heartbeat threads, and their fix (retain the primary context and make it current there), are
kvcache-ai/Mooncake PR #2034 and LMCache PR #5169 [OBS-ext]. The driver example makes the
primary context current for each call and passes; a copy without that fails with the driver's
error named, and still passes on the engine's main thread, where torch made the context
current (as it does there on a real machine).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvreg.harness.run.core import run_scenario
from kvreg.harness.run.implementation import make_implementation

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "runtime_doors" / "driver_register.py"
IMPLS = Path(__file__).parent / "impls"
FILE = "regressions/cuda_driver_worker_thread"
WORKER = [f"{FILE}/worker-thread-one-call", f"{FILE}/worker-thread-chunks",
          f"{FILE}/worker-thread-fail-middle-chunk"]
MAIN = "mla/page_first_direct/above-limit"


def _no_context(tmp_path: Path) -> Path:
    """The example with its context step planted out: it relies on a context it never made
    current."""
    text = EXAMPLE.read_text()
    assert text.count("with _primary_context(driver):") == 2
    path = tmp_path / "driver_no_context.py"
    path.write_text(text.replace("with _primary_context(driver):",
                                 "with contextlib.nullcontext():").replace(
        "from __future__ import annotations\n", "from __future__ import annotations\n\n"
        "import contextlib\n", 1))
    return path


def _run(sid: str, path: Path, style: str, by_id, *,  # type: ignore[no-untyped-def]
         keep_trace: bool = False):
    assert sid in by_id, f"bundled scenario {sid} is missing from the catalog"
    return run_scenario(by_id[sid], make_implementation(f"{path}:register",
                                                        f"{path}:teardown", style),
                        keep_trace=keep_trace)


@pytest.mark.parametrize("sid", WORKER)
@pytest.mark.parametrize(("path", "style"), [
    (EXAMPLE, "driver"), (IMPLS / "driver_retain_per_thread.py", "driver"),
    (ROOT / "examples" / "runtime_doors" / "ctypes_register.py", "ctypes")])
def test_correct_code_passes_on_a_worker_thread(  # type: ignore[no-untyped-def]
        sid: str, path: Path, style: str, by_id) -> None:
    result = _run(sid, path, style, by_id)
    assert result.verdict == "pass", result.violations


@pytest.mark.parametrize("sid", WORKER[:2])
def test_driver_code_without_a_context_fails_with_the_drivers_error(  # type: ignore[no-untyped-def]
        sid: str, by_id, tmp_path: Path) -> None:
    result = _run(sid, _no_context(tmp_path), "driver", by_id)
    assert result.verdict == "fail"
    assert "CUDA_ERROR_INVALID_CONTEXT (rc=201)" in result.first_violation, result.violations
    assert ("; cuMemHostRegister(kv_buffer+0x0, " in result.first_violation
            and "returned 201 (invalid device context): no CUDA context is current on the "
            "calling thread" in result.first_violation), result.first_violation


def test_a_driver_teardown_that_never_made_a_context_current_leaks(by_id) -> None:  # type: ignore[no-untyped-def]
    # driver_fallback_drained registers through libcudart first (the runtime makes the
    # primary context current on that thread), but its teardown, on a fresh thread, calls
    # only cuMemHostUnregister: 201, and the chunk stays pinned
    result = _run(WORKER[0], IMPLS / "driver_fallback_drained.py", "driver", by_id,
                  keep_trace=True)
    assert [v.rule for v in result.violations] == ["leak"], result.violations
    assert "driver.cuMemHostUnregister" in result.trace_text
    assert "CUDA_ERROR_INVALID_CONTEXT" in result.trace_text or "201" in result.trace_text


def test_the_same_code_passes_on_the_engines_main_thread(by_id, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    result = _run(MAIN, _no_context(tmp_path), "driver", by_id)
    assert result.verdict == "pass", result.violations


def test_the_calling_thread_is_fresh_per_call_and_raises_what_the_code_raised() -> None:
    import threading

    from kvreg.fakes.cuda.fake_cuda import FakeCuda
    from kvreg.fakes.cuda.profile import profile_with_options
    from kvreg.harness.cuda.calling_thread import call_on_register_thread

    worker = FakeCuda(profile_with_options("h200-r580", {"register_thread": "worker"}))
    seen = {call_on_register_thread(worker, threading.get_ident) for _ in range(3)}
    assert threading.get_ident() not in seen
    assert call_on_register_thread(FakeCuda(), threading.get_ident) == threading.get_ident()

    def fails() -> None:
        raise KeyError("from the code")

    with pytest.raises(KeyError, match="from the code") as info:
        call_on_register_thread(worker, fails)
    assert info.traceback[-1].name == "fails"
