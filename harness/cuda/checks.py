"""The rules a run is judged by, applied to the call trace: each broken rule is a sentence.

Every violation names what a user can act on: which buffer and offset, which call, which
code, which page and seam. Violations are ordered by the call where they happened, so the
first one printed is the first thing that went wrong.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field, replace
from typing import Any

from kvreg.fakes.cuda.cuda_python_face import pointer_arg, unsigned_arg
from kvreg.fakes.cuda.errors import CUDART_UNLOADING, error_name, error_string
from kvreg.fakes.recorder import TraceEntry
from kvreg.harness.pools import BufferSpec, PoolGeometry
from kvreg.harness.pools.families import extent_at
from kvreg.harness.run.endstate import (
    PROGRAMMING_ERRORS,
    BufferEnd,
    FailedCall,
    Pending,
    Raised,
    check_error_pending,
    check_error_reported,
    check_registered,
    decisive_failure,
    fully_registered,
    live_ranges,
    mark_superseded,
    recovered_warnings,
    rollback_phrase,
)
from kvreg.harness.run.result import Violation, whole_message

from .seam_cuts import FLIP, check_cuda_seams, cuts_of

__all__ = ["BufferRun", "RunRecord", "Violation", "buffer_ends", "check_run", "check_warnings",
           "plain_trace"]

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


def _exc(e: BaseException) -> str:
    text = whole_message(e)
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def check_run(r: RunRecord) -> list[Violation]:
    """All violations of a run, first one first."""
    _plain(r)
    out: list[Violation] = []
    regs = [e for e in r.trace if e.api in REGISTER_APIS]
    unregs = [e for e in r.trace if e.api in UNREGISTER_APIS]

    if r.budget_hit is not None:
        out.append(Violation("call-budget", f"stopped after {r.budget_hit} runtime calls: the "
                             "implementation loops or never finishes", 0))

    # every registration call: non-empty, inside a buffer, within the limit
    for e in regs:
        ptr, size = int(e.args[0]), int(e.args[1])
        if size == 0:
            out.append(Violation("register-size-zero", f"call #{e.seq + 1} registers 0 bytes at "
                                 f"{_where(r, ptr)} (cudaHostRegister rejects it with 1)", e.seq))
            continue
        owner = _owner(r, ptr, size)
        if owner is None:
            out.append(Violation("range-outside-buffer", f"call #{e.seq + 1} registers "
                                 f"[{_where(r, ptr)}, +{size}) which is not inside one pool "
                                 "buffer", e.seq))
        elif size > r.limit and e.code == 0 and r.limit_contract and (
                owner.granularity is not None or not r.limit_needs_granularity):
            # a call the runtime refused registered nothing: its results judge it
            # (issue 24 §4), the contract binds what was registered
            out.append(Violation("chunk-over-limit", f"call #{e.seq + 1} registers {size} bytes at "
                                 f"{_where(r, ptr)}, above the chunk limit {r.limit}", e.seq))

    # register failures: raised, and rolled back
    failed_codes = [e for e in regs if e.code]
    # chunks an injected unregister failure pinned during rollback (before any teardown)
    register_phase_end = r.teardown_start if r.teardown_start is not None else 1 << 62
    rollback_injected = {int(e.args[0]) for e in unregs
                         if e.injected and e.code and e.seq < register_phase_end}
    ends = buffer_ends(r)
    end_of = {e.label: e for e in ends}
    fallback = _fell_back(r, ends)
    swallowed: set[str] = set()
    for b in r.buffers:
        mine = [e for e in failed_codes if b.seq_start <= e.seq < b.seq_end]
        # a failed call the implementation recovered from (fully registered, nothing raised)
        # is judged by seams-aligned and reported as a warning; an optional pinning that fell
        # back to pageable memory is judged by registered and error-pending
        if mine and b.error is None and not fully_registered(end_of[b.spec.name]) \
                and not fallback:
            swallowed.add(b.spec.name)
            # the failure register ended on, not a refusal it recovered from by chunks
            f = decisive_failure(end_of[b.spec.name].failed)
            logged = next((m for m in r.logs if m), "")
            out.append(Violation(
                "error-swallowed",
                f"{f.api} returned {f.code} ({f.text}) at "
                f"{_where(r, f.ptr)} (call #{f.seq + 1}) but register() of {b.spec.name} "
                "returned normally: the pool would run "
                + ("partly unpinned" if end_of[b.spec.name].live else "unpinned")
                + (f" (it only logged: {logged!r})" if logged else ""), f.seq))
    # expectations
    if r.expect == "success":
        for b in r.buffers:
            if b.error is not None:
                out.append(Violation("unexpected-error", _explain_error(r, b), b.seq_end))
                break
    elif r.expect == "rejected":
        # the first buffer whose granularity exceeds the limit must raise before any call
        failed_b = next((b for b in r.buffers if b.error is not None), None)
        if failed_b is None:
            big = next((b for b in r.buffers
                        if b.granularity is not None and b.granularity > r.limit), None)
            what = (f"granularity {big.granularity} of {big.spec.name}" if big is not None
                    else "every buffer")
            out.append(Violation("not-rejected", f"register() accepted {what} with chunk limit "
                                 f"{r.limit}; it must raise before any call",
                                 r.buffers[-1].seq_end if r.buffers else 0))
        else:
            b = failed_b
            calls = [e for e in regs if b.seq_start <= e.seq < b.seq_end]
            assert b.error is not None
            if calls:
                out.append(Violation("rejected-too-late", f"register() of {b.spec.name} made "
                                     f"{len(calls)} cudaHostRegister call(s) before rejecting "
                                     f"granularity {b.granularity} > limit {r.limit}",
                                     calls[0].seq))
            elif not isinstance(b.error, ValueError):
                out.append(Violation("rejected-wrong-error", f"register() of {b.spec.name} "
                                     f"rejected the granularity with {_exc(b.error)}; expected "
                                     "ValueError", b.seq_end))
    # expect == "register-error": the failure paths are judged by the rules below; when the
    # scenario's fault never fires (fewer calls than it assumed, or code that never makes the
    # query it targets), success is expected instead; a fault that fired on a query verifying
    # a chunk (cudaHostGetDevicePointer, ...) is the scenario's register error too
    fired = failed_codes or [e for e in r.trace if e.injected and e.code
                             and e.seq < register_phase_end and e.api not in UNREGISTER_APIS]
    if r.expect == "register-error" and not fired and r.budget_hit is None:
        for b in r.buffers:
            if b.error is not None:
                out.append(Violation("unexpected-error", _explain_error(r, b), b.seq_end))
                break

    # the end state: what is registered, where the seams are, what was raised and left pending
    out += check_registered(ends, r.pinning, skip=swallowed)
    out += _seams(r, ends)[0]
    out += check_error_reported(ends)
    out += check_error_pending(r.pending, fallback=fallback,
                               private_read=r.private_cudart_error == "read")[0]

    # transfers over every page
    t = r.transfer
    if t is not None and not t.ok:
        out.append(Violation("transfer-failed", _explain_transfer(r, t), 1 << 40))

    # unregister only live bases; each chunk released exactly once
    live: dict[int, int] = {}
    released: dict[int, int] = {}
    for e in sorted(regs + unregs, key=lambda x: x.seq):
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
        elif ptr == 0:
            continue    # NULL was never registered: nothing lost (a warning, _null_unregisters)
        elif e.code in (1, 713):
            why = ("was already released" if released.get(ptr) else
                   "is inside a registration, not its base" if e.code == 1 else
                   "was never registered")
            out.append(Violation("unregister-not-a-live-base",
                                 f"call #{e.seq + 1} unregisters {_where(r, ptr)}, which {why} "
                                 f"({e.code} {error_name(e.code)})", e.seq))

    # nothing left registered, except what an injected rollback failure pinned for good
    # while register raised (its exception is how the caller learns of it), and what the
    # runtime releases itself as it unloads (a warning: _unloading_warnings)
    unloading = _unloading(r)
    for ptr, size in r.live_end:
        if ptr in unloading:
            continue
        owner = _owner(r, ptr, size)
        if ptr in rollback_injected:
            if owner is not None and owner.error is None and owner.spec.name in swallowed:
                call = next(e for e in unregs if e.injected and int(e.args[0]) == ptr)
                out.append(Violation("leak", f"chunk [{_where(r, ptr)}, +{size}) is still "
                                     f"registered: its rollback cudaHostUnregister (call "
                                     f"#{call.seq + 1}) returned {call.code} "
                                     f"{error_name(call.code or 0)} and register() of "
                                     f"{owner.spec.name} returned normally, so nothing "
                                     "tracks it any more", 1 << 41))
            continue
        if owner is not None and owner.error is not None:
            msg = (f"chunk [{_where(r, ptr)}, +{size}) is still registered after register() of "
                   f"{owner.spec.name} failed: {_rollback(r, owner, rollback_injected)}")
            rule = "not-rolled-back"
        elif any(step.startswith("teardown") for step in r.exercised):
            lost = any(e.injected and int(e.args[0]) == ptr for e in unregs)
            msg = (f"chunk [{_where(r, ptr)}, +{size}) was never released"
                   + (": teardown lost track of it after cudaHostUnregister failed"
                      if lost else " by teardown"))
            rule = "leak"
        else:
            continue
        out.append(Violation(rule, msg, 1 << 41))

    # teardown errors are only acceptable when a fault was injected into teardown
    for rnd, idx, err in r.teardown_errors:
        injected = any(e.injected for e in unregs if r.teardown_start is not None
                       and e.seq >= r.teardown_start)
        # a teardown may raise to report an injected unregister failure; a TypeError and its
        # kin are the code's own bug whatever else went wrong (its other rules fire too)
        if not injected or type(err).__name__ in PROGRAMMING_ERRORS:
            out.append(Violation("teardown-raised", f"teardown #{rnd + 1} of "
                                 f"{r.buffers[idx].spec.name} raised {_exc(err)}", 1 << 42))
    out.sort(key=lambda v: v.seq)
    return out


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
    out = []
    for b in r.buffers:
        end = b.base + b.spec.nbytes
        mine = [e for e in regs if b.seq_start <= e.seq < b.seq_end]
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
                            r.copy_across, (1 << 40) + 1)


def _fell_back(r: RunRecord, ends: list[BufferEnd]) -> bool:
    """An optional pinning that registered nothing and raised nothing."""
    return (r.pinning == "optional" and bool(ends) and all(e.returned for e in ends)
            and not any(e.live for e in ends))


def check_warnings(r: RunRecord) -> list[Violation]:
    """What passes but deserves a line in the report: recovered failures, pending errors,
    unregisters of NULL."""
    ends = buffer_ends(r)
    specs = r.geometry.buffers()
    families = r.geometry.extent_families() if r.geometry.has_page_meta else None
    out = recovered_warnings(ends, lambda e: bool(cuts_of(
        e, specs[_index(r, e)], families, _index(r, e))))
    out += _seams(r, ends)[1]
    out += check_error_pending(r.pending, fallback=_fell_back(r, ends),
                               private_read=r.private_cudart_error == "read")[1]
    out += _null_unregisters(r)
    out += _unloading_warnings(r)
    out.sort(key=lambda v: v.seq)
    return out


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


def _unloading_warnings(r: RunRecord) -> list[Violation]:
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


def _null_unregisters(r: RunRecord) -> list[Violation]:
    """cudaHostUnregister(NULL) (an empty buffer's data_ptr(), ctypes' None): the runtime
    answers an error (docs/cuda-runtime.md §3) and nothing was registered at NULL, so nothing
    is lost; the error it leaves is error-pending's to judge."""
    return [Violation("unregister-null", f"call #{e.seq + 1} unregisters NULL, which is never "
                      f"registered: the runtime answers {e.code} {error_name(e.code or 0)} and "
                      "nothing is released", e.seq)
            for e in r.trace if e.api in UNREGISTER_APIS and e.code and not e.injected
            and int(e.args[0]) == 0]


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
    msg = f"register() of {b.spec.name} raised {_exc(b.error)}"
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
