"""The runner leaves the process as it found it, and scenarios do not depend on each other.

After any run (passing, failing, an implementation that raises, or one that tampers with
the very things the runner patches), ``torch.cuda.cudart``, the ``cuda.bindings.runtime``
module entry, ``SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB``, the SIGALRM handler and the root
logger's handlers are what they were before.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

import pytest
import torch

from kvreg.harness.run.core import run_scenario
from kvreg.harness.run.implementation import Implementation, make_implementation

ENV = "SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB"
CUDA_MODULES = ("cuda", "cuda.bindings", "cuda.bindings.runtime")
MISSING = object()
MLA = "mla/page_first_direct"


def _raise_in_register(buffer: Any, registration_granularity_bytes: int | None = None) -> None:
    torch.cuda.cudart().cudaHostRegister(buffer.data_ptr(), 4096, 0)
    raise RuntimeError("implementation blew up")


def _raise_in_teardown(buffer: Any) -> None:
    raise OSError("teardown blew up")


def _tamper(buffer: Any, registration_granularity_bytes: int | None = None) -> None:
    """Changes everything the runner patched, then fails."""
    os.environ[ENV] = "999"
    torch.cuda.cudart = lambda: "tampered"
    sys.modules["cuda.bindings.runtime"] = object()  # type: ignore[assignment]
    raise ValueError("tampered and failed")


def _system_exit(buffer: Any, registration_granularity_bytes: int | None = None) -> None:
    raise SystemExit(3)


def _noop_teardown(buffer: Any) -> None:
    return None


def _impls() -> dict[str, Callable[[], Implementation]]:
    from pathlib import Path

    impls = Path(__file__).parent / "impls"
    return {
        "passing": lambda: make_implementation(),
        "failing": lambda: make_implementation(f"{impls / 'byte_offset_seams.py'}:register"),
        "leaking": lambda: make_implementation(f"{impls / 'never_unregisters.py'}:register"),
        "raises-in-register": lambda: Implementation("sglang", "raises", _raise_in_register,
                                                     _noop_teardown),
        "raises-in-teardown": lambda: Implementation(
            "sglang", "raises", make_implementation(
                f"{impls / 'byte_offset_seams.py'}:register").register_fn, _raise_in_teardown),
        "tampers": lambda: Implementation("sglang", "tampers", _tamper, _noop_teardown),
        "system-exit": lambda: Implementation("sglang", "exits", _system_exit, _noop_teardown),
    }


def _real(module: Any) -> bool:
    """A genuine installed module, not one of kvreg's stand-ins."""
    if module is MISSING or type(module).__module__.startswith("kvreg"):
        return False
    where = getattr(module, "__file__", None) or next(iter(getattr(module, "__path__", [])), "")
    return str(where).startswith((sys.prefix, sys.base_prefix))   # venv or its base


def _same(before: dict[str, Any], after: dict[str, Any]) -> None:
    """``after`` equals ``before``; a module absent before may since have been imported for
    real (the fake imports the installed cuda-bindings for its enum types), never faked."""
    for name in CUDA_MODULES:
        old, new = before["modules"][name], after["modules"][name]
        assert new is old or (old is MISSING and _real(new)), (name, old, new)
    assert {k: v for k, v in after.items() if k != "modules"} == \
        {k: v for k, v in before.items() if k != "modules"}


def _snapshot() -> dict[str, Any]:
    return {
        "cudart": torch.cuda.cudart,
        "_cudart": torch.cuda.__dict__.get("_cudart", MISSING),
        "is_available": torch.cuda.is_available,
        "modules": {m: sys.modules.get(m, MISSING) for m in CUDA_MODULES},
        "env": os.environ.get(ENV, MISSING),
        "sigalrm": signal.getsignal(signal.SIGALRM),
        "alarm": signal.alarm(0),
        "log_handlers": list(logging.getLogger().handlers),
    }


@pytest.mark.parametrize("env", [None, "7"], ids=["env-unset", "env-set"])
@pytest.mark.parametrize("bindings", [True, False], ids=["bindings-imported", "bindings-absent"])
@pytest.mark.parametrize("kind", list(_impls()))
def test_everything_patched_is_restored(kind: str, env: str | None, bindings: bool, by_id,
                                        monkeypatch) -> None:
    if env is None:
        monkeypatch.delenv(ENV, raising=False)
    else:
        monkeypatch.setenv(ENV, env)
    if bindings:
        pytest.importorskip("cuda.bindings.runtime")
    else:
        for name in CUDA_MODULES:
            monkeypatch.delitem(sys.modules, name, raising=False)
    before = _snapshot()
    seen: dict[str, Any] = {}

    def spy(buffer: Any, granularity: int | None = None) -> None:
        # while the implementation runs, the runner's patches are in place
        # asked while it runs: after the run the handle is a closed door (StaleHandleError)
        seen["cudart_registers"] = hasattr(torch.cuda.cudart(), "cudaHostRegister")
        seen["env"] = os.environ.get(ENV)
        seen["bindings"] = sys.modules.get("cuda.bindings.runtime")

    spied = Implementation("sglang", "spy", spy, _noop_teardown)
    run_scenario(by_id[f"{MLA}/below-limit"], spied)
    assert seen["env"] == "1"                       # the scenario's chunk_gb
    assert seen["cudart_registers"]                 # the fake's torch face
    assert seen["bindings"] is not before["modules"]["cuda.bindings.runtime"]
    assert not _real(seen["bindings"])              # the fake face, while running
    _same(before, _snapshot())

    impl = _impls()[kind]()
    try:
        result = run_scenario(by_id[f"{MLA}/above-limit"], impl)
    except SystemExit:
        assert kind == "system-exit"            # not swallowed: it is the process's to handle
    else:
        expected = "pass" if kind == "passing" else "fail"
        assert result.verdict == expected, result.violations
    _same(before, _snapshot())


def test_spy_sees_the_fake_not_the_real_cudart(by_id) -> None:
    seen: dict[str, Any] = {}

    def spy(buffer: Any, granularity: int | None = None) -> None:
        cudart = torch.cuda.cudart()
        seen["rc"] = int(cudart.cudaHostRegister(buffer.data_ptr(), 4096, 0))
        seen["un"] = int(cudart.cudaHostUnregister(buffer.data_ptr()))

    result = run_scenario(by_id[f"{MLA}/below-limit"],
                          Implementation("sglang", "spy", spy, _noop_teardown), keep_trace=True)
    assert seen == {"rc": 0, "un": 0}
    assert result.calls >= 2 and "cudaHostRegister" in result.trace_text


def _outcome(result) -> tuple[Any, ...]:
    return (result.verdict, result.as_dict(), result.calls, result.trace_text)


@pytest.mark.parametrize("impl_name", ["reference", "byte_offset_seams", "no_rollback",
                                       "never_unregisters"])
def test_a_scenario_run_twice_gives_the_same_result(impl_name: str, by_id) -> None:
    from pathlib import Path

    spec = (None if impl_name == "reference"
            else f"{Path(__file__).parent / 'impls' / impl_name}.py:register")
    impl = make_implementation(spec)
    for sid in (f"{MLA}/above-limit", f"{MLA}/fail-middle-chunk", f"{MLA}/fail-during-teardown"):
        first = run_scenario(by_id[sid], impl, keep_trace=True)
        second = run_scenario(by_id[sid], impl, keep_trace=True)
        assert _outcome(first) == _outcome(second), sid


def test_order_does_not_matter(by_id) -> None:
    from pathlib import Path

    impls = Path(__file__).parent / "impls"
    leaky = make_implementation(f"{impls / 'never_unregisters.py'}:register")
    seams = make_implementation(f"{impls / 'byte_offset_seams.py'}:register")
    ref = make_implementation()
    plan = [(f"{MLA}/above-limit", leaky), (f"{MLA}/fail-middle-chunk", seams),
            (f"{MLA}/above-limit", ref), ("mha/page_first/fail-during-rollback", ref),
            (f"{MLA}/fail-during-teardown", seams), (f"{MLA}/above-limit", seams)]
    forward = [_outcome(run_scenario(by_id[sid], impl, keep_trace=True)) for sid, impl in plan]
    backward = [_outcome(run_scenario(by_id[sid], impl, keep_trace=True))
                for sid, impl in reversed(plan)]
    assert forward == backward[::-1]
    verdicts = [o[0] for o in forward]
    # a leak or a fault of an earlier scenario does not spill into a later one
    assert verdicts == ["fail", "pass", "pass", "pass", "fail", "fail"]
