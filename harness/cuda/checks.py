"""The rules a run is judged by, applied to the call trace: each broken rule is a sentence.

Each rule is one function, declared with the registry's decorator (harness/run/rules.py);
:func:`check_run` and :func:`check_warnings` run this target's functions in order.

Every violation names what a user can act on: which buffer and offset, which call, which
code, which page and seam. Violations are ordered by the call where they happened, so the
first one printed is the first thing that went wrong.
"""

from __future__ import annotations

import ctypes
import functools
from bisect import bisect_left
from dataclasses import dataclass, field, replace
from typing import Any

from kvreg.fakes.cuda.cuda_python_face import pointer_arg, unsigned_arg
from kvreg.fakes.cuda.errors import CUDART_UNLOADING, error_name, error_string
from kvreg.fakes.recorder import TraceEntry
from kvreg.harness.pools import BufferSpec, PoolGeometry
from kvreg.harness.pools.families import extent_at
from kvreg.harness.run.endstate import (
    BufferEnd,
    FailedCall,
    Pending,
    Raised,
    check_error_pending,
    check_error_reported,
    check_registered,
    decisive_failure,
    exc_text,
    fell_back,
    fully_registered,
    live_ranges,
    mark_superseded,
    recovered_warnings,
    rollback_phrase,
    teardown_raised,
)
from kvreg.harness.run.rejection import RejectionWords, check_rejection
from kvreg.harness.run.result import Violation
from kvreg.harness.run.rules import (
    ORDER_RELEASE,
    ORDER_SEAMS,
    ORDER_TRANSFER,
    REGISTER,
    SITE_CALL,
    TEARDOWN,
    VIOLATION,
    WARNING,
    rule,
    run_rules,
)

from .seam_cuts import FLIP, check_cuda_seams, cuts_of

__all__ = ["BufferRun", "RunRecord", "Violation", "buffer_ends", "check_run", "check_warnings",
           "not_retried_warnings", "plain_trace"]

TARGET = "cuda"      # the target whose rules these are (harness/run/rules.py)

GiB = 1 << 30
_SIZE_T_END = 1 << 64   # one past the largest size_t
# a registration is the runtime call or its driver twin (docs/cuda-runtime.md §2.1)
REGISTER_APIS = frozenset({"cudaHostRegister", "cuMemHostRegister"})
UNREGISTER_APIS = frozenset({"cudaHostUnregister", "cuMemHostUnregister"})


@dataclass
class BufferRun:
    index: int
    spec: BufferSpec
    base: int
    granularity: int | None
    error: BaseException | None = None
    handle: Any = None
    registered: bool = False
    seq_start: int = 0
    seq_end: int = 0
    raised: Raised | None = None       # what register raised, as plain data
    unit: int | None = None            # the copy unit its seams must respect


@dataclass
class RunRecord:
    """Everything a run produced, for the checks."""

    geometry: PoolGeometry
    limit: int
    expect: str
    per_call_limit: int | None
    buffers: list[BufferRun]
    trace: list[TraceEntry]
    transfer: Any = None                   # TransferResult or None
    teardown_errors: list[tuple[int, int, BaseException]] = field(default_factory=list)
    teardown_start: int | None = None
    live_end: list[tuple[int, int]] = field(default_factory=list)
    budget_hit: int | None = None
    exercised: tuple[str, ...] = ()
    logs: list[str] = field(default_factory=list)
    pinning: str = "required"              # "optional": nothing registered also passes
    pending: list[Pending] = field(default_factory=list)   # last errors left per runtime
    # the device profile's [UNC] copy rule (docs/cuda-runtime.md §5.4): decides seams-aligned
    copy_across: str = "reject"
    # the device profile's [UNC] reader of a private libcudart's last error (§6.2)
    private_cudart_error: str = "unread"
    plain: bool = False                    # trace arguments made plain ints (plain_trace)
    # the chunk-limit contract (harness/run/contract.py): whether the implementation declared
    # one, and whether it binds only where a granularity is passed (SGLang's: G None is one call)
    limit_contract: bool = True
    limit_needs_granularity: bool = True
    # one teardown round only (no repeatable-teardown contract): the chunks a failed
    # unregister left pinned there, base -> (size, the call) (teardown_once.py)
    kept: dict[int, tuple[int, TraceEntry]] = field(default_factory=dict)


def plain_trace(trace: list[TraceEntry]) -> list[TraceEntry]:
    """``trace`` with the registration calls' pointers and sizes as ints (NULL is 0), as the
    runtime read them: every value the real API accepts can be judged. One reader,
    cuda-python's conversion (``pointer_arg``, docs/cuda-runtime.md §9): ctypes' None for a
    NULL ``void *``, a ``c_void_p``, an object with ``__int__`` (``CUdeviceptr``), a buffer.
    A plain int stays as recorded (an injected fault records the call before any binding
    converted it)."""
    out = []
    for e in trace:
        if e.api in REGISTER_APIS | UNREGISTER_APIS and not all(
                type(a) is int for a in e.args[:2]):
            e = replace(e, args=tuple(a if i > 1 or type(a) is int else
                                      pointer_arg(a) if i == 0 or e.api in UNREGISTER_APIS else
                                      _size_arg(a) for i, a in enumerate(e.args)))
        out.append(e)
    return out


def _size_arg(value: Any) -> int:
    """A register call's size as the binding reads a ``size_t`` (``unsigned_arg``), a
    ``c_size_t`` by its value: an ``np.int64`` is the number it holds, never its address. A
    number the binding refuses (negative, 2**64 or more) stays the number recorded."""
    if isinstance(value, ctypes._SimpleCData):
        value = value.value or 0
    try:
        return int(unsigned_arg(value, _SIZE_T_END, "size_t"))
    except OverflowError:
        return int(value)
    except TypeError:
        return pointer_arg(value)


def _plain(r: RunRecord) -> None:
    if not r.plain:
        r.trace, r.plain = plain_trace(r.trace), True


def _where(record: RunRecord, ptr: int) -> str:
    if ptr == 0:
        return "NULL"
    for b in record.buffers:
        if b.base <= ptr < b.base + max(b.spec.nbytes, 1):
            return f"{b.spec.name}+{ptr - b.base:#x}"
    for b in record.buffers:
        if ptr == b.base + b.spec.nbytes:   # one past the end (e.g. an empty trailing chunk)
            return f"{b.spec.name}+{ptr - b.base:#x} (the end of {b.spec.name})"
    for b in record.buffers:   # a base rounded down to an alignment the tensor does not have
        if b.base - (2 << 20) <= ptr < b.base:
            odd = f", whose base {b.base:#x} is not 2 MiB-aligned" if b.base % (2 << 20) else ""
            gap = b.base - ptr
            return f"{b.spec.name}-{gap:#x} ({gap} bytes before {b.spec.name}{odd})"
    return f"{ptr:#x} (outside every pool buffer)"


def _owner(record: RunRecord, ptr: int, size: int) -> BufferRun | None:
    for b in record.buffers:
        if b.base <= ptr and ptr + size <= b.base + b.spec.nbytes:
            return b
    return None


def buffer_ends(r: RunRecord) -> list[BufferEnd]:
    """Each buffer as its register left it: live registrations replayed from the trace up to
    teardown, the failed registration calls it made, what it raised."""
    _plain(r)
    stop = r.teardown_start if r.teardown_start is not None else 1 << 62
    events = [("reg" if e.api in REGISTER_APIS else "unreg", int(e.args[0]),
               int(e.args[1]) if e.api in REGISTER_APIS else 0, e.code == 0)
              for e in r.trace if e.seq < stop
              and e.api in REGISTER_APIS | UNREGISTER_APIS]
    live = live_ranges(events)
    regs = [e for e in r.trace if e.api in REGISTER_APIS]
    seqs = [e.seq for e in regs]
    ordered = seqs == sorted(seqs)   # threads may record their calls out of order
    out = []
    for b in r.buffers:
        end = b.base + b.spec.nbytes
        mine = regs[bisect_left(seqs, b.seq_start):bisect_left(seqs, b.seq_end)] if ordered \
            else [e for e in regs if b.seq_start <= e.seq < b.seq_end]
        failed = mark_superseded(
            [FailedCall(e.seq, e.api, int(e.args[0]), int(e.args[1]), int(e.code),
                        error_name(int(e.code)), error_string(int(e.code)))
             for e in mine if e.code],
            [(e.seq, int(e.args[0]), int(e.args[1])) for e in mine])
        out.append(BufferEnd(b.spec.name, b.base, b.spec.nbytes, b.unit,
                             b.registered and b.error is None, b.raised, b.seq_end,
                             [(p, s) for p, s in sorted(live.items())
                              if p < end and p + s > b.base], failed))
    return out


def _index(r: RunRecord, end: BufferEnd) -> int:
    return next(b.index for b in r.buffers if b.spec.name == end.label)


def _seams(r: RunRecord, ends: list[BufferEnd]) -> tuple[list[Violation], list[Violation]]:
    """seams-aligned: (violations, warnings) for the buffers whose register returned."""
    returned = [e for e in ends if e.returned]
    if not returned:
        return [], []
    specs = r.geometry.buffers()
    indexes = [_index(r, e) for e in returned]
    families = r.geometry.extent_families() if r.geometry.has_page_meta else None
    return check_cuda_seams(returned, [specs[i] for i in indexes], indexes, families,
                            r.copy_across, ORDER_SEAMS)


class _Run:
    """A record with what several rules read from it, each computed once."""

    def __init__(self, r: RunRecord) -> None:
        _plain(r)
        self.r = r

    @functools.cached_property
    def regs(self) -> list[TraceEntry]:
        return [e for e in self.r.trace if e.api in REGISTER_APIS]

    @functools.cached_property
    def unregs(self) -> list[TraceEntry]:
        return [e for e in self.r.trace if e.api in UNREGISTER_APIS]

    @functools.cached_property
    def register_phase_end(self) -> int:
        return self.r.teardown_start if self.r.teardown_start is not None else 1 << 62

    @functools.cached_property
    def rollback_injected(self) -> set[int]:
        """Chunks an injected unregister failure pinned during rollback (before teardown)."""
        return {int(e.args[0]) for e in self.unregs
                if e.injected and e.code and e.seq < self.register_phase_end}

    @functools.cached_property
    def ends(self) -> list[BufferEnd]:
        return buffer_ends(self.r)

    @functools.cached_property
    def end_of(self) -> dict[str, BufferEnd]:
        return {e.label: e for e in self.ends}

    @functools.cached_property
    def fallback(self) -> bool:
        return fell_back(self.r.pinning, self.ends)

    @functools.cached_property
    def swallowed(self) -> list[BufferRun]:
        """The buffers whose register returned normally after a failed call, not fully
        registered: a failed call the implementation recovered from is judged by
        seams-aligned and reported as a warning; an optional pinning that fell back to
        pageable memory is judged by registered and error-pending."""
        failed = [e for e in self.regs if e.code]
        return [b for b in self.r.buffers
                if any(b.seq_start <= e.seq < b.seq_end for e in failed) and b.error is None
                and not fully_registered(self.end_of[b.spec.name]) and not self.fallback]

    @functools.cached_property
    def swallowed_names(self) -> set[str]:
        return {b.spec.name for b in self.swallowed}

    @functools.cached_property
    def seams(self) -> tuple[list[Violation], list[Violation]]:
        return _seams(self.r, self.ends)

    @functools.cached_property
    def pending(self) -> tuple[list[Violation], list[Violation]]:
        return check_error_pending(self.r.pending, fallback=self.fallback,
                                   private_read=self.r.private_cudart_error == "read")


def check_run(r: RunRecord) -> list[Violation]:
    """All violations of a run, first one first: the cuda target's rule functions."""
    return run_rules(TARGET, VIOLATION, _Run(r))


def check_warnings(r: RunRecord) -> list[Violation]:
    """What passes but deserves a line in the report: recovered failures, pending errors,
    unregisters of NULL, chunks left to an unloading runtime or to a single teardown."""
    return run_rules(TARGET, WARNING, _Run(r))


@rule("call-budget", target=TARGET, doc="scenarios/FORMAT.md")
def _call_budget(c: _Run) -> list[Violation]:
    if c.r.budget_hit is None:
        return []
    return [Violation("call-budget", f"stopped after {c.r.budget_hit} runtime calls: the "
                      "implementation loops or never finishes", 0)]


@rule("register-size-zero", target=TARGET, doc="docs/cuda-runtime.md §2.2")
def _size_zero(c: _Run) -> list[Violation]:
    return [Violation("register-size-zero", f"call #{e.seq + 1} registers 0 bytes at "
                      f"{_where(c.r, int(e.args[0]))} (cudaHostRegister rejects it with 1)",
                      e.seq) for e in c.regs if int(e.args[1]) == 0]


@rule("range-outside-buffer", target=TARGET, doc="docs/cuda-runtime.md §2.2")
def _outside(c: _Run) -> list[Violation]:
    return [Violation("range-outside-buffer", f"call #{e.seq + 1} registers "
                      f"[{_where(c.r, int(e.args[0]))}, +{int(e.args[1])}) which is not "
                      "inside one pool buffer", e.seq)
            for e in c.regs if int(e.args[1]) != 0
            and _owner(c.r, int(e.args[0]), int(e.args[1])) is None]


@rule("chunk-over-limit", target=TARGET, doc="harness/run/contract.py", site=SITE_CALL,
      contract="chunk-limit",
      summary="no registration call above the chunk limit when the pool passes a "
      "granularity, where the implementation declares a chunk limit; a call the runtime "
      "refused registered nothing and breaks no limit")
def _over_limit(c: _Run) -> list[Violation]:
    r, out = c.r, []
    if not r.limit_contract:
        return []
    for e in c.regs:
        ptr, size = int(e.args[0]), int(e.args[1])
        owner = _owner(r, ptr, size) if size else None
        # a call the runtime refused registered nothing: its results judge it
        # (issue 24 §4), the contract binds what was registered
        if owner is not None and size > r.limit and e.code == 0 and (
                owner.granularity is not None or not r.limit_needs_granularity):
            out.append(Violation("chunk-over-limit", f"call #{e.seq + 1} registers {size} "
                                 f"bytes at {_where(r, ptr)}, above the chunk limit "
                                 f"{r.limit}", e.seq))
    return out


@rule("error-swallowed", target=TARGET, doc="docs/cuda-runtime.md §2.2")
def _swallowed(c: _Run) -> list[Violation]:
    out = []
    for b in c.swallowed:
        end = c.end_of[b.spec.name]
        # the failure register ended on, not a refusal it recovered from by chunks
        f = decisive_failure(end.failed)
        logged = next((m for m in c.r.logs if m), "")
        out.append(Violation(
            "error-swallowed",
            f"{f.api} returned {f.code} ({f.text}) at "
            f"{_where(c.r, f.ptr)} (call #{f.seq + 1}) but register() of {b.spec.name} "
            "returned normally: the pool would run "
            + ("partly unpinned" if end.live else "unpinned")
            + (f" (it only logged: {logged!r})" if logged else ""), f.seq))
    return out


def _first_raised(r: RunRecord) -> BufferRun | None:
    return next((b for b in r.buffers if b.error is not None), None)


@rule("unexpected-error", target=TARGET, doc="scenarios/FORMAT.md")
def _unexpected(c: _Run) -> list[Violation]:
    """register raised where success is expected; with ``expect = "register-error"`` where
    the scenario's fault never fired (fewer calls than it assumed, or code that never makes
    the query it targets); a fault that fired on a query verifying a chunk
    (cudaHostGetDevicePointer, ...) is the scenario's register error too."""
    r = c.r
    fired = any(e.code for e in c.regs) or any(
        e.injected and e.code and e.seq < c.register_phase_end
        and e.api not in UNREGISTER_APIS for e in r.trace)
    if r.expect == "success" or (r.expect == "register-error" and not fired
                                 and r.budget_hit is None):
        b = _first_raised(r)
        if b is not None:
            return [Violation("unexpected-error", _explain_error(r, b), b.seq_end)]
    return []


_WORDS = RejectionWords("granularity", "granularity", "chunk limit", "limit",
                        "cudaHostRegister", "; it must raise before any call")


def _rejection(rule_name: str, c: _Run) -> list[Violation]:
    return check_rejection(rule_name, _WORDS, c.r.expect, c.r.limit, c.r.buffers,
                           lambda b: b.spec.name, c.regs)


@rule("not-rejected", target=TARGET, doc="harness/run/contract.py")
def _not_rejected(c: _Run) -> list[Violation]:
    """The first buffer whose granularity exceeds the limit must raise before any call."""
    return _rejection("not-rejected", c)


@rule("rejected-too-late", target=TARGET, doc="harness/run/contract.py")
def _too_late(c: _Run) -> list[Violation]:
    return _rejection("rejected-too-late", c)


@rule("rejected-wrong-error", target=TARGET, doc="harness/run/contract.py")
def _wrong_error(c: _Run) -> list[Violation]:
    return _rejection("rejected-wrong-error", c)


@rule("registered", target=TARGET, doc="docs/cuda-runtime.md §2.2")
def _registered(c: _Run) -> list[Violation]:
    return check_registered(c.ends, c.r.pinning, skip=c.swallowed_names)


@rule("seams-aligned", target=TARGET, doc="docs/cuda-runtime.md §5.4")
def _seams_aligned(c: _Run) -> list[Violation]:
    return c.seams[0]


@rule("error-reported", target=TARGET, doc="docs/cuda-runtime.md §1")
def _error_reported(c: _Run) -> list[Violation]:
    return check_error_reported(c.ends)


@rule("error-pending", target=TARGET, doc="docs/cuda-runtime.md §6")
def _error_pending(c: _Run) -> list[Violation]:
    return c.pending[0]


@rule("transfer-failed", target=TARGET, doc="docs/cuda-runtime.md §5.3")
def _transfer(c: _Run) -> list[Violation]:
    t = c.r.transfer
    if t is None or t.ok:
        return []
    return [Violation("transfer-failed", _explain_transfer(c.r, t), ORDER_TRANSFER)]


@rule("unregister-not-a-live-base", target=TARGET, doc="docs/cuda-runtime.md §3")
def _not_live_base(c: _Run) -> list[Violation]:
    """Unregister only live bases; each chunk released exactly once."""
    live: dict[int, int] = {}
    released: dict[int, int] = {}
    out = []
    for e in sorted(c.regs + c.unregs, key=lambda x: x.seq):
        ptr = int(e.args[0])
        if e.api in REGISTER_APIS:
            if e.code == 0:
                live[ptr] = int(e.args[1])
            continue
        if e.injected:
            continue
        if e.code == 0:
            live.pop(ptr, None)
            released[ptr] = released.get(ptr, 0) + 1
        elif ptr != 0 and e.code in (1, 713):
            # NULL was never registered: nothing lost (a warning, unregister-null)
            why = ("was already released" if released.get(ptr) else
                   "is inside a registration, not its base" if e.code == 1 else
                   "was never registered")
            out.append(Violation("unregister-not-a-live-base",
                                 f"call #{e.seq + 1} unregisters {_where(c.r, ptr)}, which "
                                 f"{why} ({e.code} {error_name(e.code)})", e.seq))
    return out


def _left(c: _Run) -> list[tuple[int, int, int, BufferRun | None]]:
    """The chunks live at the end, each with its place among them and its buffer, but those
    the runtime releases itself as it unloads (a warning: unregister-unloading)."""
    unloading = _unloading(c.r)
    return [(i, ptr, size, _owner(c.r, ptr, size)) for i, (ptr, size) in enumerate(c.r.live_end)
            if ptr not in unloading]


@rule("not-rolled-back", target=TARGET, doc="docs/cuda-runtime.md §3.1")
def _not_rolled_back(c: _Run) -> list[Violation]:
    """What a register that raised left registered, but what an injected rollback failure
    pinned for good (its exception is how the caller learns of it)."""
    return [Violation("not-rolled-back", f"chunk [{_where(c.r, ptr)}, +{size}) is still "
                      f"registered after register() of {owner.spec.name} failed: "
                      f"{_rollback(c.r, owner, c.rollback_injected)}", ORDER_RELEASE + i)
            for i, ptr, size, owner in _left(c)
            if ptr not in c.rollback_injected and owner is not None
            and owner.error is not None]


@rule("leak", target=TARGET, doc="docs/cuda-runtime.md §3.1")
def _leak(c: _Run) -> list[Violation]:
    """Nothing left registered after teardown; a chunk a failed rollback pinned where
    register returned normally (its error swallowed) is lost too."""
    r, out = c.r, []
    torn_down = any(step.startswith("teardown") for step in r.exercised)
    for i, ptr, size, owner in _left(c):
        lost = [e for e in c.unregs if e.injected and int(e.args[0]) == ptr]
        if ptr in c.rollback_injected:
            if owner is not None and owner.error is None \
                    and owner.spec.name in c.swallowed_names:
                call = lost[0]
                out.append(Violation("leak", f"chunk [{_where(r, ptr)}, +{size}) is still "
                                     f"registered: its rollback cudaHostUnregister (call "
                                     f"#{call.seq + 1}) returned {call.code} "
                                     f"{error_name(call.code or 0)} and register() of "
                                     f"{owner.spec.name} returned normally, so nothing "
                                     "tracks it any more", ORDER_RELEASE + i))
        elif (owner is None or owner.error is None) and torn_down:
            out.append(Violation("leak", f"chunk [{_where(r, ptr)}, +{size}) was never released"
                                 + (": teardown lost track of it after cudaHostUnregister "
                                    "failed" if lost else " by teardown"), ORDER_RELEASE + i))
    return out


@rule("teardown-raised", target=TARGET, doc="docs/cuda-runtime.md §3.2")
def _teardown_raised(c: _Run) -> list[Violation]:
    return teardown_raised([(rnd, c.r.buffers[idx].spec.name, err)
                            for rnd, idx, err in c.r.teardown_errors],
                           c.unregs, c.r.teardown_start)


@rule("recovered", target=TARGET, doc="docs/cuda-runtime.md §2.2", emits=WARNING)
def _recovered(c: _Run) -> list[Violation]:
    specs = c.r.geometry.buffers()
    families = c.r.geometry.extent_families() if c.r.geometry.has_page_meta else None
    return recovered_warnings(c.ends, lambda e: bool(cuts_of(
        e, specs[_index(c.r, e)], families, _index(c.r, e))))


@rule("seams-aligned", target=TARGET, doc="docs/cuda-runtime.md §5.4", emits=WARNING)
def _seams_allowed(c: _Run) -> list[Violation]:
    return c.seams[1]


@rule("error-pending", target=TARGET, doc="docs/cuda-runtime.md §6", emits=WARNING)
def _pending_warnings(c: _Run) -> list[Violation]:
    return c.pending[1]


def _unloading(r: RunRecord) -> dict[int, TraceEntry]:
    """The chunks live at the end once the runtime said it is unloading, each with the call
    that said so: its own last cudaHostUnregister where that returned
    cudaErrorCudartUnloading, else the first call that did. The runtime is shutting down and
    the process's pinned memory goes with it (docs/cuda-runtime.md §3.1), so a chunk
    forgotten then costs nothing, tried or not: a teardown that stopped at the first such
    error (SGLang 0.5.23's error path raises a TypeError there) never tries the rest."""
    first: TraceEntry | None = None     # in teardown: register's rollback has its own rules
    last: dict[int, TraceEntry] = {}
    rollback_failed: set[int] = set()   # chunks register's rollback failed to release
    start = r.teardown_start if r.teardown_start is not None else 1 << 62
    for e in r.trace:
        if e.code == CUDART_UNLOADING and first is None and e.seq >= start \
                and e.api in REGISTER_APIS | UNREGISTER_APIS:
            first = e
        if e.api in UNREGISTER_APIS:
            last[int(e.args[0])] = e
            if e.code and e.seq < start:
                rollback_failed.add(int(e.args[0]))
    out = {}
    for ptr, size in r.live_end:
        own = last.get(ptr)
        if own is not None and own.code == CUDART_UNLOADING:
            out[ptr] = own
        elif first is not None and ptr not in rollback_failed:
            # lost before teardown (a register that raised and did not roll it back) is
            # judged as it was, unloading or not
            owner = _owner(r, ptr, size)
            if owner is None or owner.error is None:
                out[ptr] = first
    return out


@rule("unregister-null", target=TARGET, doc="docs/cuda-runtime.md §3", emits=WARNING,
      site=SITE_CALL, judges=(REGISTER, TEARDOWN),
      summary="`cudaHostUnregister(NULL)` (an empty buffer's `data_ptr()`, which ctypes hands "
      "over as `None`): the runtime answers an error and nothing was registered there, so "
      "nothing is lost; the error it leaves is `error-pending`'s to judge")
def _null_unregisters(c: _Run) -> list[Violation]:
    """cudaHostUnregister(NULL) (an empty buffer's data_ptr(), ctypes' None): the runtime
    answers an error (docs/cuda-runtime.md §3) and nothing was registered at NULL, so nothing
    is lost; the error it leaves is error-pending's to judge."""
    return [Violation("unregister-null", f"call #{e.seq + 1} unregisters NULL, which is never "
                      f"registered: the runtime answers {e.code} {error_name(e.code or 0)} and "
                      "nothing is released", e.seq)
            for e in c.unregs if e.code and not e.injected
            and int(e.args[0]) == 0]


@rule("unregister-unloading", target=TARGET, doc="docs/cuda-runtime.md §3.1", emits=WARNING,
      site=SITE_CALL, judges=(TEARDOWN,),
      summary="a chunk still registered at the end whose last unregister returned "
      "`cudaErrorCudartUnloading` (4), or that teardown left untried after an unregister "
      "returned 4: the runtime is shutting down and releases pinned memory as it goes, so "
      "forgetting it costs nothing; a chunk whose unregister failed with another code stays "
      "pinned: forgetting it is a `leak`")
def _unloading_warnings(c: _Run) -> list[Violation]:
    r = c.r
    unloading = _unloading(r)
    out = []
    for ptr, size in r.live_end:
        e = unloading.get(ptr)
        if e is None:
            continue
        said = f"{e.api} (call #{e.seq + 1}) returned {CUDART_UNLOADING} " \
            f"{error_name(CUDART_UNLOADING)}"
        why = (f"its last {said}" if e.api in UNREGISTER_APIS and int(e.args[0]) == ptr
               else f"teardown left it after {said}")
        out.append(Violation("unregister-unloading", f"chunk [{_where(r, ptr)}, +{size}) is "
                             f"still registered: {why}; harmless, the runtime is unloading "
                             "and releases pinned memory as it goes", e.seq))
    return out


@rule("unregister-not-retried", target=TARGET, doc="docs/cuda-runtime.md §3.2",
      emits=WARNING)
def _not_retried(c: _Run) -> list[Violation]:
    """One warning per chunk a once-only teardown left pinned (``RunRecord.kept``,
    teardown_once.py)."""
    return not_retried_warnings(c.r, c.r.kept)


def not_retried_warnings(record: RunRecord, kept: dict[int, tuple[int, TraceEntry]]
                         ) -> list[Violation]:
    """One warning per chunk of ``kept`` (base -> (size, the failed call))."""
    return [Violation("unregister-not-retried", f"chunk [{_at(record, ptr)}, +{size}) stays "
                      f"registered: its cudaHostUnregister in the only teardown (call "
                      f"#{e.seq + 1}) returned {e.code} {error_name(e.code or 0)}, and no later "
                      "teardown retries it (the implementation declares no repeatable "
                      "teardown); it stays pinned until the process exits", e.seq)
            for ptr, (size, e) in sorted(kept.items())]


def _at(record: RunRecord, ptr: int) -> str:
    """``buffer+0xoffset`` as the checks write a chunk base (a registered base lies inside
    its buffer)."""
    for b in record.buffers:
        if b.base <= ptr < b.base + max(b.spec.nbytes, 1):
            return f"{b.spec.name}+{ptr - b.base:#x}"
    return f"{ptr:#x}"


def _rollback(r: RunRecord, b: BufferRun, pinned_by_fault: set[int]) -> str:
    """"no rollback" / "partial rollback" of ``b``'s register, naming what it left."""
    calls = [e for e in r.trace if b.seq_start <= e.seq < b.seq_end and e.code == 0]
    earlier = sum(1 for e in calls if e.api in REGISTER_APIS)
    released = sum(1 for e in calls if e.api in UNREGISTER_APIS)
    left = [f"[{_where(r, p)}, +{s})" for p, s in r.live_end
            if p not in pinned_by_fault and _owner(r, p, s) is b]
    return rollback_phrase(earlier, released, left)


def _explain_error(r: RunRecord, b: BufferRun) -> str:
    assert b.error is not None
    failing = next(e.failed for e in buffer_ends(r) if e.label == b.spec.name)
    msg = f"register() of {b.spec.name} raised {exc_text(b.error)}"
    if failing:
        e = decisive_failure(failing)   # not a refusal it recovered from by chunks
        size = e.size
        msg += f"; {e.api}({_where(r, e.ptr)}, {size}) returned {e.code} ({e.text})"
        if e.code == 201:   # CUDA_ERROR_INVALID_CONTEXT (docs/cuda-runtime.md §13)
            msg += (": no CUDA context is current on the calling thread; make the device's "
                    "primary context current there (cuDevicePrimaryCtxRetain, cuCtxSetCurrent)")
        if e.code == 2 and r.per_call_limit is not None and size >= r.per_call_limit:
            msg += (f": a single call of {size / GiB:.1f} GiB is at or above the "
                    f"{r.per_call_limit // GiB} GiB per-call ceiling of R580+ drivers; chunk it")
    return msg


def _across_two(r: RunRecord, ptr: int, size: int) -> bool:
    """Whether [ptr, ptr+size) is wholly registered, by two or more registrations: the [UNC]
    case of docs/cuda-runtime.md §5.4 (a partly pageable range fails by the documented rule)."""
    stop = r.teardown_start if r.teardown_start is not None else 1 << 62
    live = live_ranges(("reg" if e.api in REGISTER_APIS else "unreg", int(e.args[0]),
                        int(e.args[1]) if e.api in REGISTER_APIS else 0, e.code == 0)
                       for e in r.trace if e.seq < stop
                       and e.api in REGISTER_APIS | UNREGISTER_APIS)
    spans = sorted((p, p + s) for p, s in live.items() if p < ptr + size and p + s > ptr)
    reach = ptr
    for start, end in spans:
        if start > reach:
            return False
        reach = max(reach, end)
    return len(spans) >= 2 and reach >= ptr + size


def _explain_transfer(r: RunRecord, t: Any) -> str:
    msg = f"batch copy of every page failed with {t.code} ({error_string(t.code)})"
    if t.failed_row is not None and r.geometry.has_page_meta:
        index, off, size, page = extent_at(r.geometry.extent_families(), t.failed_row)
        name = r.geometry.buffers()[index].name
        regs = [e for e in r.trace if e.api in REGISTER_APIS and e.code == 0]
        base = next((x.base for x in r.buffers if x.index == index), 0)
        seams = sorted(int(e.args[0]) - base for e in regs
                       if base < int(e.args[0]) < base + off + size
                       and int(e.args[0]) > base + off)
        regions = r.geometry.buffers()[index].regions
        region = next((reg.name for reg in regions if reg.offset <= off < reg.end), "") \
            if len(regions) > 1 else ""
        where = f"page {page}" + (f" of the {region}" if region else "")
        msg = (f"{where} of {name} [{off}, {off + size}) spans registrations at offset "
               f"{seams[0] if seams else '?'}: cudaMemcpyBatchAsync returns {t.code} "
               f"({error_string(t.code)})")
        if _across_two(r, base + off, size):
            msg += f": a copy across two registrations, which fails under {FLIP}"
    elif t.detail:
        msg += f": {t.detail}"
    return msg
