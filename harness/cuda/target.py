"""Run one scenario against one implementation on the fake, and judge it.

The flow (design.md "One scenario, end to end"): build the pool's buffers (virtual or
real), a fresh fake with the scenario's device profile and fault plan, then register every
buffer through the implementation, copy every page through the batch API, tear down as
often as the scenario says, and hand the trace to the checks. Everything the run changes
(``torch.cuda.cudart``, ``cuda.bindings.runtime``, the chunk-limit environment variable)
is restored whatever happens. A call budget stops implementations that loop.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from kvreg.fakes.fake_cuda import FakeCuda
from kvreg.fakes.patching import patch_torch_cudart

from .adapters import Implementation
from .buffers import allocate, allocate_pinnable
from .checks import BufferRun, RunRecord, Violation, check_run
from .scenario import Scenario
from .transfers import copy_every_page

__all__ = ["CallBudgetExceeded", "ScenarioResult", "run_scenario"]

GiB = 1 << 30
ENV_CHUNK_GB = "SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB"
WALL_LIMIT_S = 120


class CallBudgetExceeded(BaseException):
    """Raised inside a runtime call once a scenario's call budget is spent.

    A BaseException, so an implementation's ``except Exception`` cannot swallow it.
    """


@dataclass
class ScenarioResult:
    id: str
    pool: str
    verdict: str                    # "pass" | "fail" | "error" | "skip"
    violations: list[Violation] = field(default_factory=list)
    reason: str = ""
    guards: str = ""
    calls: int = 0
    seconds: float = 0.0
    trace_text: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "pool": self.pool, "verdict": self.verdict,
                "violations": [v.as_dict() for v in self.violations],
                **({"reason": self.reason} if self.reason else {})}

    @property
    def first_violation(self) -> str:
        if self.violations:
            return self.violations[0].message
        return self.reason


@contextmanager
def _env(name: str, value: str | None) -> Iterator[None]:
    old = os.environ.get(name)
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


class _LogCapture(logging.Handler):
    """Keep what the implementation logs: "errors only logged" is a bug kvreg names."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextmanager
def _capture_logs() -> Iterator[list[str]]:
    handler = _LogCapture()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield handler.messages
    finally:
        root.removeHandler(handler)


@contextmanager
def _wall_guard(seconds: int) -> Iterator[None]:
    """SIGALRM-based stop for pure-Python loops (main thread only; a no-op elsewhere)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal,
                                                                                 "SIGALRM"):
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        raise CallBudgetExceeded(f"still running after {seconds} s")

    old = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _empty_buffers(space: Any, specs: Any) -> list[Any]:
    return [space.virtual((0,), spec.dtype, name=spec.name) for spec in specs]


def _real_backend(sc: Scenario, backend: Any) -> tuple[Any, str | None]:
    """A RealCuda for ``backend`` ("cuda" or a RealCuda for tests), or the reason to skip."""
    from kvreg.realhw.backend import HardwareUnavailable, RealCuda
    from kvreg.realhw.capabilities import detect
    from kvreg.realhw.sizing import plan_for_real

    real = RealCuda() if backend == "cuda" else backend
    try:
        caps = detect(real.runtime_module, rdma=False, torch=False)
    except HardwareUnavailable as exc:
        return None, str(exc)
    decision = plan_for_real(sc, caps)
    if decision.action != "run":
        return None, decision.reason
    return real, None


def run_scenario(sc: Scenario, impl: Implementation, *, keep_trace: bool = False,
                 backend: Any = "fake") -> ScenarioResult:
    """Run and judge one scenario; never raises for a misbehaving implementation.

    ``backend`` is "fake" (default), "cuda" (the real runtimes through kvreg.realhw: the
    pool is materialised in real memory, or the scenario is skipped with the reason when
    the machine cannot hold it), or a RealCuda-like object (tests use stand-ins).
    """
    if sc.target == "mooncake":
        from .mooncake_runner import run_mooncake_scenario

        return run_mooncake_scenario(sc, impl, keep_trace=keep_trace)
    start = time.perf_counter()
    result = ScenarioResult(sc.id, sc.pool, "pass", guards=sc.guards)
    why_not = impl.check_limit(sc.chunk_limit)
    if why_not:
        result.verdict, result.reason = "skip", why_not
        return result
    geometry = sc.geometry()
    specs = geometry.buffers()
    real_hw = backend != "fake"
    fake: Any
    if real_hw:
        fake, why_not = _real_backend(sc, backend)
        if fake is None:
            result.verdict, result.reason = "skip", str(why_not)
            return result
        buffers = (_empty_buffers(fake.space, specs) if sc.empty
                   else allocate_pinnable(geometry, fake))
    else:
        fake = FakeCuda(sc.profile)
        buffers = (_empty_buffers(fake.space, specs) if sc.empty
                   else allocate(geometry, fake.space, real=sc.memory == "real"))
    for spec_dict in sc.faults:
        fake.faults.arm_from_dict(spec_dict)
    budget = CallBudgetExceeded(f"call budget of {sc.call_budget} runtime calls spent")
    fake.faults.arm("cudart.*", raise_=budget, after=sc.call_budget)
    extents = geometry.page_extents() if geometry.has_page_meta else None
    runs: list[BufferRun] = []
    for i, spec in enumerate(specs):
        if not spec.cuda_registered:
            continue
        if sc.empty:   # the zero-byte stand-in of this buffer
            spec = type(spec)(spec.name, (0,), spec.dtype, spec.granularity, spec.copy_unit, (),
                              spec.cuda_registered)
        runs.append(BufferRun(i, spec, int(buffers[i].data_ptr()), None))
    record = RunRecord(geometry, sc.chunk_limit, sc.expect, fake.profile.per_call_limit, runs,
                       [], exercised=sc.exercise)
    chunk_gb = str(sc.chunk_limit // GiB) if sc.chunk_limit % GiB == 0 else None
    try:
        patcher = patch_torch_cudart(fake.torch) if real_hw else fake.patch()
        with patcher, _env(ENV_CHUNK_GB, chunk_gb), _wall_guard(WALL_LIMIT_S), \
                _capture_logs() as logs:
            record.logs = logs
            cudart = fake.torch
            # 1. register every buffer, as the pool constructor does; stop at the first error
            for b in runs:
                try:
                    b.granularity = impl.granularity(b.spec, sc.chunk_limit, extents, b.index)
                except ValueError as exc:
                    b.error = exc
                    b.seq_start = b.seq_end = len(fake.trace)
                    break
                b.seq_start = _next_seq(fake)
                try:
                    b.handle = impl.register(cudart, buffers[b.index], b.spec, b.granularity,
                                             sc.chunk_limit)
                    b.registered = True
                except CallBudgetExceeded:
                    raise
                except Exception as exc:
                    b.error = exc
                b.seq_end = _next_seq(fake)
                if b.error is not None:
                    break
            ok = all(b.error is None for b in runs)
            # 2. every page through the batch copy API
            if ok and "transfers" in sc.exercise and not sc.empty:
                record.transfer = copy_every_page(
                    fake.runtime, geometry, buffers,
                    fault_detail=None if real_hw else
                    (lambda: fake.cuda_runtime.last_copy_fault))
            # 3. teardown, as often as asked (also after a failed register: pool destroy)
            record.teardown_start = _next_seq(fake)
            rounds = [step for step in sc.exercise if step.startswith("teardown")]
            for rnd, step in enumerate(rounds):
                for b in reversed(runs):
                    # "teardown-after-failure" also tears down the buffer whose register
                    # raised, as code that always calls teardown in a `finally` does; only the
                    # sglang style has something to call then (its handle is the buffer)
                    failed_too = (step == "teardown-after-failure" and b.error is not None
                                  and impl.style == "sglang")
                    if not b.registered and not failed_too:
                        continue
                    try:
                        impl.teardown(cudart, buffers[b.index], b.handle)
                    except CallBudgetExceeded:
                        raise
                    except Exception as exc:
                        record.teardown_errors.append((rnd, b.index, exc))
    except CallBudgetExceeded:
        record.budget_hit = len(fake.trace)
    except Exception as exc:  # kvreg itself failed: report, don't crash the catalog
        result.verdict = "error"
        result.reason = f"kvreg internal error: {type(exc).__name__}: {exc}"
        return result
    record.trace = list(fake.trace)
    record.live_end = [(r.base, r.size) for r in fake.live_registrations()]
    if real_hw:
        fake.release_all()   # leave the real driver clean, whatever the implementation did
    result.violations = check_run(record)
    result.verdict = "fail" if result.violations else "pass"
    result.calls = len(record.trace)
    result.seconds = time.perf_counter() - start
    if keep_trace or result.violations:
        result.trace_text = fake.trace.format(limit=200)
    return result


def _next_seq(fake: FakeCuda) -> int:
    """The sequence number the next recorded call will get."""
    rows = fake.trace._rows
    return int(rows[-1][0]) + 1 if rows else 0
