"""Assertions on what a real pool registered: kvreg's end-state rules over any tensors.

``kvreg run`` judges a registration *function* against kvreg's model of a pool. A user's own
pool class allocates, registers and destroys its buffers itself; :class:`PoolCheck` takes the
fake those calls reached, the pool's buffers and their geometry (or the granularity the pool
passes) and judges the same record with the same rules (``harness/cuda/checks.py``
``check_run``): every byte registered exactly once, seams on copy units, calls inside the
buffers and under the chunk limit, errors reported and none left pending, every page copied
through the batch-copy API (at the cost of seams, ``harness/cuda/selection.py``), and after
teardown nothing left registered. The sentences are the ones ``kvreg run`` prints.

    check = PoolCheck(fake, [pool.kv_buffer], geometry)
    check.assert_registered()      # after the constructor
    pool.destroy()
    check.assert_released()        # after teardown
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from kvreg.fakes.dtypes import DType
from kvreg.harness.cuda.checks import BufferRun, RunRecord, check_run, check_warnings
from kvreg.harness.cuda.transfers import copy_every_page
from kvreg.harness.cuda.world import pending_errors
from kvreg.harness.plan.chunking import PlanError, reference_unit
from kvreg.harness.pools.base import BufferSpec, PoolGeometry, Region
from kvreg.harness.run.endstate import PINNING, summarize_exception
from kvreg.harness.run.result import Violation
from kvreg.harness.run.rules import teardown_rules
from kvreg.harness.run.world import next_seq

__all__ = ["PoolCheck", "PoolRegistrationError", "assert_pool_registered",
           "assert_pool_released", "chunk_limit_from_env"]

GiB = 1 << 30
ENV_CHUNK_GB = "SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB"
_UNSET: Any = object()


class PoolRegistrationError(AssertionError):
    """Raised by the ``assert_*`` functions: one ``[rule] sentence`` line per violation."""

    def __init__(self, what: str, violations: Sequence[Violation]) -> None:
        self.violations = list(violations)
        lines = [f"{what}: {len(self.violations)} violation(s) of kvreg's registration rules"]
        lines += [f"  [{v.rule}] {v.message}" for v in self.violations]
        super().__init__("\n".join(lines))


def chunk_limit_from_env() -> int:
    """The per-call limit SGLang reads: max(SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB, 1) GiB,
    default 256 (docs/pools.md §1.1)."""
    raw = os.environ.get(ENV_CHUNK_GB, "256")
    try:
        return max(int(raw), 1) * GiB
    except ValueError:
        raise ValueError(f"{ENV_CHUNK_GB}={raw!r} is not an integer number of GiB") from None


class _GivenBuffers(PoolGeometry):
    """Buffers known only by their granularity: no page meta, so nothing to copy."""

    pool_type = "given"
    layout = "given"
    page_size = 1

    def __init__(self, specs: Sequence[BufferSpec]) -> None:
        self._specs = tuple(specs)

    @property
    def page_count(self) -> int:
        return 0

    @property
    def has_page_meta(self) -> bool:
        return False

    def buffers(self) -> tuple[BufferSpec, ...]:
        return self._specs

    def params(self) -> dict[str, Any]:
        return {}


def _nbytes(tensor: Any, label: str) -> int:
    if not (hasattr(tensor, "data_ptr") and hasattr(tensor, "numel")
            and hasattr(tensor, "element_size")):
        raise TypeError(f"buffer {label}: expected a tensor (data_ptr, numel, element_size), "
                        f"got {type(tensor).__name__}")
    return int(tensor.numel()) * int(tensor.element_size())


def _named(buffers: Sequence[Any] | Mapping[str, Any]) -> list[tuple[str | None, Any]]:
    if isinstance(buffers, Mapping):
        return [(str(k), v) for k, v in buffers.items()]
    if not isinstance(buffers, Sequence) or isinstance(buffers, (str, bytes)):
        raise TypeError("buffers must be a sequence of tensors or a mapping name -> tensor, got "
                        f"{type(buffers).__name__}")
    return [(None, b) for b in buffers]


def _from_geometry(named: list[tuple[str | None, Any]], geometry: PoolGeometry
                   ) -> list[BufferSpec]:
    specs = geometry.buffers()
    names = [s.name for s in specs]
    if len(named) != len(specs):
        missing = names[len(named):]
        extra = len(named) - len(specs)
        why = (f"missing {', '.join(missing)}" if missing else f"{extra} more than it has")
        raise ValueError(f"the {geometry.pool_type}/{geometry.layout} geometry has buffers "
                         f"{', '.join(names)}; got {len(named)} tensor(s): {why}")
    for (given, tensor), spec in zip(named, specs, strict=True):
        if given is not None and given != spec.name:
            raise ValueError(f"buffer {given!r} is not the geometry's {spec.name!r} (buffers "
                             f"come in the geometry's order: {', '.join(names)})")
        nbytes = _nbytes(tensor, spec.name)
        if nbytes != spec.nbytes:
            raise ValueError(f"buffer {spec.name}: the tensor has {nbytes} bytes "
                             f"{tuple(tensor.shape)}, the geometry's has {spec.nbytes} "
                             f"{spec.shape}: the geometry does not describe this pool")
    return list(specs)


def _from_granularity(named: list[tuple[str | None, Any]], granularity: Any
                      ) -> list[BufferSpec]:
    per = list(granularity) if isinstance(granularity, Sequence) else [granularity] * len(named)
    if len(per) != len(named):
        raise ValueError(f"granularity lists {len(per)} value(s) for {len(named)} buffer(s)")
    out = []
    for i, ((given, tensor), g) in enumerate(zip(named, per, strict=True)):
        name = given or f"buffer{i}"
        nbytes = _nbytes(tensor, name)
        if g is not None and (not isinstance(g, int) or isinstance(g, bool) or g <= 0):
            raise ValueError(f"buffer {name}: granularity must be a positive int or None, "
                             f"got {g!r}")
        # G None: upstream registers the buffer in one call, so no seam is allowed in it
        unit = g if g is not None else max(nbytes, 1)
        regions = (Region(name, 0, nbytes),) if nbytes else ()
        out.append(BufferSpec(name, (nbytes,), DType("uint8", 1), g, unit, regions))
    return out


class PoolCheck:
    """The registrations of one pool in ``fake`` (a ``FakeCuda``), judged as ``kvreg run``
    judges a scenario. Create it after the pool's constructor returned (or raised: pass the
    exception as ``raised``)."""

    def __init__(self, fake: Any, buffers: Sequence[Any] | Mapping[str, Any],
                 geometry: PoolGeometry | None = None, *, granularity: Any = _UNSET,
                 chunk_limit: int | None = None, pinning: str = "required",
                 raised: BaseException | None = None, copies: bool = True) -> None:
        if not hasattr(fake, "trace") or not hasattr(fake, "live_registrations"):
            raise TypeError(f"fake must be a FakeCuda, got {type(fake).__name__}")
        if (geometry is None) == (granularity is _UNSET):
            raise ValueError("give either geometry (a kvreg.harness.pools geometry) or "
                             "granularity (what the pool passes per buffer), not both or "
                             "neither")
        if pinning not in PINNING:
            raise ValueError(f"pinning must be one of {', '.join(PINNING)}, got {pinning!r}")
        named = _named(buffers)
        if geometry is not None:
            specs = _from_geometry(named, geometry)
            self.geometry: PoolGeometry = geometry
        else:
            specs = _from_granularity(named, granularity)
            self.geometry = _GivenBuffers(specs)
        self.fake = fake
        self.tensors = [t for _, t in named]
        self.specs = specs
        self.limit = chunk_limit_from_env() if chunk_limit is None else int(chunk_limit)
        if self.limit <= 0:
            raise ValueError(f"chunk_limit must be positive, got {chunk_limit!r}")
        self.pinning = pinning
        self.raised = raised
        self.copies = copies
        self._mark: int | None = None
        self._record: RunRecord | None = None

    @property
    def record(self) -> RunRecord | None:
        """The record :meth:`registered` judged (its ``transfer`` says what was copied)."""
        return self._record

    # -- the record ----------------------------------------------------------------------
    def _runs(self, stop: int) -> list[BufferRun]:
        regs = [e for e in self.fake.trace if e.seq < stop and e.api in
                ("cudaHostRegister", "cuMemHostRegister", "cudaHostUnregister",
                 "cuMemHostUnregister")]
        failing = next((e for e in regs if "Register" in e.api and "Un" not in e.api
                        and e.code), None)
        families = (self.geometry.extent_families() if self.geometry.has_page_meta else None)
        runs = []
        for i, (spec, tensor) in enumerate(zip(self.specs, self.tensors, strict=True)):
            if not spec.cuda_registered:
                continue
            base = int(tensor.data_ptr())
            mine = [e.seq for e in regs if base <= int(e.args[0]) < base + max(spec.nbytes, 1)]
            run = BufferRun(i, spec, base, spec.granularity, registered=True,
                            seq_start=min(mine, default=0), seq_end=max(mine, default=-1) + 1)
            if self.raised is not None and failing is not None and \
                    base <= int(failing.args[0]) < base + max(spec.nbytes, 1):
                run.error, run.registered = self.raised, False
                run.raised = summarize_exception(self.raised)
            try:
                run.unit = reference_unit(spec, self.limit, families, i)[0]
            except PlanError:
                run.unit = None
            runs.append(run)
        if self.raised is not None and not any(r.error for r in runs) and runs:
            runs[-1].error, runs[-1].registered = self.raised, False
            runs[-1].raised = summarize_exception(self.raised)
        return runs

    def _build(self, *, teardown: bool) -> RunRecord:
        fake = self.fake
        stop = self._mark if teardown and self._mark is not None else next_seq(fake)
        runs = self._runs(stop)
        expect = "register-error" if self.raised is not None else "success"
        record = RunRecord(self.geometry, self.limit, expect, fake.profile.per_call_limit,
                           runs, [], pinning=self.pinning,
                           exercised=("register", "teardown") if teardown else ("register",),
                           private_cudart_error=str(fake.profile.private_cudart_error))
        return record

    def registered(self) -> list[Violation]:
        """Violations of the register phase (``[]`` when the pool registered correctly)."""
        fake = self.fake
        record = self._build(teardown=False)
        record.pending = pending_errors(fake, "register")
        ok = self.raised is None and all(r.error is None for r in record.buffers)
        if self.copies and ok and self.geometry.has_page_meta:
            record.transfer = copy_every_page(
                fake.runtime, self.geometry, self.tensors,
                registrations=[(r.base, r.size) for r in fake.live_registrations()],
                fault_detail=lambda: fake.cuda_runtime.last_copy_fault)
            fake.cuda_runtime.get_last_error()   # kvreg's copies are not the pool's error
        record.trace = list(fake.trace)
        self._mark = next_seq(fake)
        self._record = record
        return check_run(record)

    def warnings(self) -> list[Violation]:
        """What passes but ``kvreg run`` would print a warning for (recovered failures)."""
        record = self._record if self._record is not None else self._build(teardown=False)
        if not record.trace:
            record.trace = list(self.fake.trace)
        return check_warnings(record)

    def released(self, teardown_errors: Sequence[BaseException] = ()) -> list[Violation]:
        """Violations of the teardown since :meth:`registered` (leaks, bad unregisters,
        errors it raised or left pending)."""
        if self._mark is None:
            self.registered()
        fake = self.fake
        record = self._build(teardown=True)
        record.teardown_start = self._mark
        record.pending = pending_errors(fake, "teardown")
        record.trace = list(fake.trace)
        record.live_end = [(r.base, r.size) for r in fake.live_registrations()]
        record.teardown_errors = [(0, 0, e) for e in teardown_errors]
        # the rules that judge a teardown (the rest judge the register, reported there); a
        # rule of both steps (error-pending) only as it judges the teardown
        judged = teardown_rules()
        return [v for v in check_run(record) if v.rule in judged
                and (v.rule != "error-pending" or "after teardown" in v.message)]

    def assert_registered(self) -> None:
        found = self.registered()
        if found:
            raise PoolRegistrationError("the pool's registrations", found)

    def assert_released(self, teardown_errors: Sequence[BaseException] = ()) -> None:
        found = self.released(teardown_errors)
        if found:
            raise PoolRegistrationError("the pool's teardown", found)


def assert_pool_registered(fake: Any, buffers: Sequence[Any] | Mapping[str, Any],
                           geometry: PoolGeometry | None = None, *,
                           granularity: Any = _UNSET, **options: Any) -> PoolCheck:
    """Raise :class:`PoolRegistrationError` unless the pool's buffers are registered as kvreg's
    rules require; return the check, whose ``assert_released()`` judges the teardown."""
    check = PoolCheck(fake, buffers, geometry, granularity=granularity, **options)
    check.assert_registered()
    return check


def assert_pool_released(fake: Any, buffers: Sequence[Any] | Mapping[str, Any],
                         geometry: PoolGeometry | None = None, *,
                         granularity: Any = _UNSET, **options: Any) -> None:
    """After teardown: raise unless nothing of the pool (or anywhere) is still registered."""
    check = PoolCheck(fake, buffers, geometry, granularity=granularity, copies=False,
                      **options)
    check._mark = 0
    check.assert_released()
