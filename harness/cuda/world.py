"""The ``cuda`` target's world: cudaHostRegister through the cudart faces of a fake (or real)
runtime.

The world: the pool's buffers (virtual or real), a fresh fake with the scenario's device
profile and fault plan, and the chunk-limit environment variable the sglang style reads.
Register every buffer through the implementation, copy the pages through the batch API (every
page of a small pool; the ones that decide the verdict of a large one: selection.py),
tear down as often as the scenario says, and hand the trace to the checks. Everything the
run changes (``torch.cuda.cudart``, ``cuda.bindings.runtime``, the environment variable) is
restored whatever happens.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, ExitStack
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any

from kvreg.fakes.cuda.fake_cuda import FakeCuda
from kvreg.fakes.cuda.profile import profile_with_options
from kvreg.fakes.patching import TORCH_DOOR, patch_torch_cudart, torch_cudart_facade
from kvreg.harness.plan.chunking import PlanError, reference_unit
from kvreg.harness.pools.buffers import allocate, allocate_pinnable, release
from kvreg.harness.run.budget import CallBudget
from kvreg.harness.run.endstate import Pending, summarize_exception
from kvreg.harness.run.isolation import env_var
from kvreg.harness.run.result import Violation
from kvreg.harness.run.target import SkipScenario
from kvreg.harness.run.world import TracedWorld, next_seq

from . import styles
from .calling_thread import call_on_register_thread
from .checks import BufferRun, RunRecord, check_run, check_warnings
from .options import ENV_CHUNK_GB, chunk_env
from .teardown_once import not_retried
from .transfers import copy_every_page

if TYPE_CHECKING:
    from kvreg.fakes.protocol import Fake
    from kvreg.harness.run.implementation import Implementation
    from kvreg.harness.scenario.format import Scenario

__all__ = ["CudaWorld", "build_world", "pending_errors"]


def empty_buffers(space: Any, specs: Any) -> list[Any]:
    """Zero-byte stand-ins of the pool's buffers (``empty = true`` scenarios)."""
    return [space.virtual((0,), spec.dtype, name=spec.name) for spec in specs]


def real_backend(sc: Scenario, backend: Any) -> tuple[Any, str | None]:
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


def pending_errors(fake: Any, step: str) -> list[Pending]:
    """Each runtime instance's last error, read without clearing it
    (docs/cuda-runtime.md §6); a real backend is not asked (its runtimes have no such hook)."""
    from kvreg.fakes.cuda.errors import error_name

    out = []
    # every instance code can reach: torch's, cuda-bindings' and libcudart loaded through
    # ctypes (the ctypes style, or a driver-style fallback to the runtime)
    for label, attr in (("torch", "torch_runtime"), ("cuda-bindings", "cuda_runtime"),
                        ("libcudart", "libcudart_runtime")):
        peek = getattr(getattr(fake, attr, None), "peek_at_last_error", None)
        if peek is None:
            continue
        code = int(peek())
        if code:
            # torch's instance reached through a ctypes handle (docs/cuda-runtime.md §6.1):
            # the code holds cudaGetLastError for it, as for any libcudart it loaded
            if label == "torch" and "torch" in getattr(fake, "ctypes_reached", ()):
                label = "libcudart"
            # a libcudart the loader mapped apart from torch's: torch never reads it (§6.2)
            out.append(Pending(step, label, code, error_name(code),
                               private=attr == "libcudart_runtime"))
    return out


class CudaWorld(TracedWorld):
    """One CUDA run: the fake (or real) runtime, the pool's buffers and the record."""

    fake: Any      # FakeCuda or RealCuda (a Fake): their CUDA faces and runtimes
    record: RunRecord

    def __init__(self, sc: Scenario, fake: Fake, buffers: list[Any], record: RunRecord,
                 real_hw: bool, budget: CallBudget) -> None:
        super().__init__(fake, record, budget)
        self.sc = sc
        self.buffers = buffers
        self.real_hw = real_hw
        # the page extents in closed form: the reference's seam unit, at any page count
        self.families = (record.geometry.extent_families() if record.geometry.has_page_meta
                         else None)
        # one teardown round only (no repeatable-teardown contract): the chunks a failed
        # unregister left pinned there are warnings (record.kept, teardown_once.py)
        self.once = False

    def isolation(self) -> AbstractContextManager[Any]:
        chunk_gb = chunk_env(self.sc)
        stack = ExitStack()
        if not self.real_hw:    # last on the way out: the scenario's buffers end with it
            stack.callback(release, [self.fake.space])
        stack.enter_context(patch_torch_cudart(self.fake.torch) if self.real_hw
                            else self.fake.patch())
        stack.enter_context(env_var(ENV_CHUNK_GB, chunk_gb))
        return stack

    def cudart(self) -> Any:
        """What the generic style gets: the process's torch door (code that keeps it across
        scenarios reaches each scenario's fake), or the fake's own face without torch."""
        return torch_cudart_facade() if TORCH_DOOR.stack else self.fake.torch

    def register(self, impl: Implementation) -> bool:
        """Register every buffer, as the pool constructor does; stop at the first error."""
        fake, sc, cudart = self.fake, self.sc, self.cudart()
        for b in self.record.buffers:
            try:
                b.granularity = styles.granularity(impl, b.spec, sc.chunk_limit, self.families,
                                                   b.index)
            except ValueError as exc:
                b.error = exc
                b.seq_start = b.seq_end = len(fake.trace)
                break
            b.seq_start = next_seq(fake)
            self.progress.step("register", b.spec.name)
            handle, error = self.attempt(partial(
                call_on_register_thread, fake, styles.register, impl, cudart,
                self.buffers[b.index], b.spec, b.granularity, sc.chunk_limit))
            if error is None:
                b.handle, b.registered = handle, True
            else:
                b.error, b.raised = error, summarize_exception(error)
            b.seq_end = next_seq(fake)
            if b.error is not None:
                break
        returned = all(b.error is None for b in self.record.buffers)
        self.record.pending = [replace(p, returned=returned)
                               for p in pending_errors(fake, "register")]
        return returned

    def transfer(self) -> None:
        """Every page through the batch copy API (nothing to copy in an empty pool)."""
        if self.sc.empty:
            return
        fake = self.fake
        self.record.transfer = copy_every_page(
            fake.runtime, self.record.geometry, self.buffers,
            registrations=[(r.base, r.size) for r in fake.live_registrations()],
            fault_detail=None if self.real_hw else (lambda: fake.cuda_runtime.last_copy_fault))
        self.coverage = self.record.transfer.coverage
        if not self.real_hw:   # kvreg's own copies must not read as the code's pending error
            fake.cuda_runtime.get_last_error()

    def teardown(self, impl: Implementation, round_: int, step: str) -> None:
        """Also after a failed register (pool destroy)."""
        self.once = not impl.contract.repeatable
        for b in reversed(self.record.buffers):
            # "teardown-after-failure" also tears down the buffer whose register raised, as
            # code that always calls teardown in a `finally` does; only the sglang style has
            # something to call then (its handle is the buffer)
            failed_too = (step == "teardown-after-failure" and b.error is not None
                          and impl.style == "sglang")
            if not b.registered and not failed_too:
                continue
            self.progress.step(f"teardown round {round_ + 1}", b.spec.name)
            _, error = self.attempt(partial(
                call_on_register_thread, self.fake, styles.teardown, impl, self.cudart(),
                self.buffers[b.index], b.handle))
            if error is not None:
                self.record.teardown_errors.append((round_, b.index, error))

    def finish(self) -> None:
        fake = self.fake
        fake.trace.observer = None
        returned = not self.record.teardown_errors
        self.record.pending += [replace(p, returned=returned)
                                for p in pending_errors(fake, "teardown")]
        self.record.trace = list(fake.trace)
        self.record.live_end = [(r.base, r.size) for r in fake.live_registrations()]
        if self.once:
            failed = not_retried(self.record)
            kept = {p: (s, failed[p]) for p, s in self.record.live_end if p in failed}
            self.record.kept = kept
            self.record.live_end = [(p, s) for p, s in self.record.live_end if p not in kept]
        if self.real_hw:
            fake.release_all()   # leave the real driver clean, whatever the code did

    def judge(self) -> list[Violation]:
        return check_run(self.record)

    def warnings(self) -> list[Violation]:
        return check_warnings(self.record)


def build_world(sc: Scenario, impl: Implementation, backend: Any, *,
                world: type[CudaWorld] = CudaWorld) -> CudaWorld:
    """The world of one run (``backend``: "fake", "cuda" or a RealCuda), of class ``world``
    (a rank's: ranked.py); raises SkipScenario where the style or the machine cannot run
    ``sc``."""
    why_not = styles.check_limit(impl, sc.chunk_limit) or impl.contract.scenario_skip_reason(
        sc.expect, sc.contract)
    if why_not:
        raise SkipScenario(why_not)
    geometry = sc.geometry()
    specs = geometry.buffers()
    real_hw = backend != "fake"
    fake: Any
    if real_hw:
        fake, why_not = real_backend(sc, backend)
        if fake is None:
            raise SkipScenario(str(why_not))
        buffers = (empty_buffers(fake.space, specs) if sc.empty
                   else allocate_pinnable(geometry, fake, sc.base_offset))
    else:
        fake = FakeCuda(profile_with_options(sc.profile, dict(sc.profile_options)))
        buffers = (empty_buffers(fake.space, specs) if sc.empty
                   else allocate(geometry, fake.space, real=sc.memory == "real",
                                 base_offset=sc.base_offset))
    for spec_dict in sc.faults:
        fake.faults.arm_from_dict(spec_dict)
    # the implementation's calls only: kvreg's copy step and checks spend none of it
    budget = CallBudget(fake.faults, "cudart.*", sc.call_budget, "runtime")
    runs: list[BufferRun] = []
    for i, spec in enumerate(specs):
        if not spec.cuda_registered:
            continue
        if sc.empty:   # the zero-byte stand-in of this buffer
            spec = type(spec)(spec.name, (0,), spec.dtype, spec.granularity, spec.copy_unit,
                              (), spec.cuda_registered)
        runs.append(BufferRun(i, spec, int(buffers[i].data_ptr()), None))
    record = RunRecord(geometry, sc.chunk_limit, sc.expect, fake.profile.per_call_limit,
                       runs, [], exercised=sc.exercise, pinning=impl.pinning or sc.pinning,
                       copy_across=str(fake.profile.copy_across_registrations),
                       private_cudart_error=str(fake.profile.private_cudart_error),
                       limit_contract=impl.contract.limit,
                       limit_needs_granularity=impl.contract.limit_with_granularity_only)
    families = geometry.extent_families() if geometry.has_page_meta else None
    for b in runs:   # the copy unit seams are judged against (the reference's)
        try:
            b.unit = reference_unit(b.spec, sc.chunk_limit, families, b.index)[0]
        except PlanError:
            b.unit = None
    return world(sc, fake, buffers, record, real_hw, budget)

