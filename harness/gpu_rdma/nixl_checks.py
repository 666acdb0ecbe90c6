"""The ``gpu_rdma`` rules read from a NIXL run: the same rules as the engine's
(checks.py), each judged by what the fake NIXL agent does (docs/gpu-rdma.md §6).

Where NIXL differs, the reading differs: the agent raises (a ``nixlBind`` status exception)
instead of returning a code, so "a registration failure dropped" is an exception swallowed;
it takes overlapping and zero-length descriptors, so ``batch-entry-invalid`` has no NIXL
reading; a registration a backend refused (or a fault injected there) leaves the agent's
metadata unloadable in every peer while the agent holds nothing of that memory kind, which
the transfers then show; a deregistration that matches no live registration raises
NIXL_ERR_NOT_FOUND, and one with a descriptor twice kills the real process. These functions
are declared for the target with the registry's decorator and find nothing in an engine's
record; :func:`check_nixl_run` runs only them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kvreg.fakes.nixl.bindings import nixl_status_t, status_name
from kvreg.fakes.nixl.sections import covered
from kvreg.fakes.recorder import TraceEntry
from kvreg.harness.run.result import Violation
from kvreg.harness.run.rules import (
    ORDER_RELEASE,
    ORDER_TRANSFER,
    VIOLATION,
    WARNING,
    rule,
)

from .buffers import KvBuffer
from .checks import (  # the engine's checks declare the rules first
    DOC,
    TARGET,
    register_raised,
    rollback_left,
    teardown_raised,
)
from .memory_saver import release_text
from .nixl_transfers import MetadataFailure
from .record import BaseNodeRun, BaseRecord

__all__ = ["NixlNodeRun", "NxRecord", "check_nixl_run", "nixl_warnings"]

NOT_FOUND = int(nixl_status_t.NIXL_ERR_NOT_FOUND)
BACKEND = int(nixl_status_t.NIXL_ERR_BACKEND)
CRASH = "NixlCrash"
Range = tuple[int, int, int]
Check = Callable[["NxRecord"], list[Violation]]
_CHECKS: list[tuple[str, Check]] = []


@dataclass
class NixlNodeRun(BaseNodeRun):
    """One node's registration through the implementation, with its agent."""

    regs: dict[str, list[Range]] = field(default_factory=dict)   # right after register

    def covers(self, e: KvBuffer) -> bool:
        return covered(self.regs.get(e.kind, []), (e.ptr, e.nbytes, e.device))


@dataclass
class NxRecord(BaseRecord[NixlNodeRun, tuple[str, int, int, int]]):
    """Everything a gpu_rdma run over NIXL produced, for the checks (``live_end``: each
    node's agent's (memory kind, addr, len, devID) registrations after teardown)."""

    metadata_failures: list[MetadataFailure] = field(default_factory=list)


def _nixl(name: str, emits: str = VIOLATION) -> Callable[[Check], Check]:
    """Declare a NIXL reading of the target's rule ``name``: in the registry (for the
    tables and the docs) finding nothing in an engine's record, and in :data:`_CHECKS`."""
    def wrap(fn: Check) -> Check:
        def guarded(r: Any) -> list[Violation]:
            return fn(r) if isinstance(r, NxRecord) else []
        guarded.__doc__ = fn.__doc__
        rule(name, target=TARGET, doc=DOC, emits=emits)(guarded)
        _CHECKS.append((emits, fn))
        return fn
    return wrap


def _calls(r: NxRecord, n: NixlNodeRun, apis: tuple[str, ...], lo: int = 0,
           hi: int | None = None) -> list[TraceEntry]:
    return r.calls(f"nixl:{n.node}", apis, lo, hi)


def _registers(r: NxRecord, n: NixlNodeRun) -> list[TraceEntry]:
    return _calls(r, n, ("register_memory",), n.seq_start, n.seq_end)


def _failed(c: TraceEntry) -> bool:
    return c.code not in (None, 0) or c.result == CRASH


def _raised(c: TraceEntry) -> str:
    return CRASH if c.result == CRASH else status_name(int(c.code)) if c.code else \
        str(c.result)


def _emptied(r: NxRecord, n: NixlNodeRun) -> TraceEntry | None:
    """The register_memory whose refusal left an empty section in the agent's metadata
    (docs/nixl.md §3.3): one that raised NIXL_ERR_BACKEND (a backend's refusal, or a fault
    injected there) while the agent held nothing of its memory kind, with no registration of
    that kind since. Sections are replayed from the trace: made by a registration or a
    refusal, erased by the deregistration that empties them."""
    held: dict[str, int] = {}                 # memory kind -> descriptors in its section
    culprit: dict[str, TraceEntry] = {}
    for c in _calls(r, n, ("register_memory", "deregister_memory")):
        kind, count = c.args[1], len(c.args[0])
        if c.api == "register_memory" and c.code == 0:
            held[kind] = held.get(kind, 0) + count
            culprit.pop(kind, None)
        elif c.api == "register_memory" and c.code == BACKEND and kind not in held:
            held[kind] = 0
            culprit[kind] = c
        elif c.api == "deregister_memory" and c.code == 0 and kind in held:
            held[kind] -= count
            if held[kind] <= 0:
                del held[kind]
                culprit.pop(kind, None)
    return min(culprit.values(), key=lambda c: c.seq, default=None)


def _text(n: NixlNodeRun, c: TraceEntry) -> str:
    ranges, mem = c.args[0], c.args[1] if len(c.args) > 1 else "?"
    names = ", ".join(n.name_at(a) for a, _, _ in ranges[:4])
    more = f", ... ({len(ranges)} descriptors)" if len(ranges) > 4 else ""
    return f"{c.api}([{names}{more}], {mem.replace('_SEG', '')})"


@_nixl("registration-failure-dropped")
def check_swallowed(r: NxRecord) -> list[Violation]:
    """register returned normally after a register_memory raised (the exception swallowed)
    and a buffer is not registered."""
    out = []
    for n in r.nodes:
        missing = [e for e in n.entries if not n.covers(e)]
        failed = [c for c in _registers(r, n) if _failed(c)]
        if n.registered and missing and failed:
            c = failed[0]
            poisoned = _emptied(r, n) is not None and any(
                m.owner == n.node for m in r.metadata_failures)
            out.append(Violation(
                "registration-failure-dropped",
                f"{n.node}: {_text(n, c)} raised {_raised(c)} and register returned normally "
                f"(the exception was swallowed); {len(missing)} buffer(s) are not registered "
                f"({', '.join(e.name for e in missing[:4])})"
                + (", and the agent's metadata no longer loads in its peer" if poisoned
                   else ""), c.seq))
    return out


@_nixl("buffer-not-registered")
def check_registered(r: NxRecord) -> list[Violation]:
    """Every buffer register was given lies in one descriptor registered with its memory
    kind and device."""
    out = []
    for n in r.nodes:
        if not n.registered or any(_failed(c) for c in _registers(r, n)):
            continue
        for e in n.entries:
            if n.covers(e):
                continue
            named = [(mem, a, s, d) for c in _registers(r, n) for a, s, d in c.args[0]
                     for mem in (c.args[1].replace("_SEG", ""),) if a <= e.ptr < a + max(s, 1)]
            if not named:
                how = f"no registration call named it (its group {e.group!r})"
            elif all(m != e.kind or d != e.device for m, _a, _s, d in named):
                m, _a, _s, d = named[0]
                how = f"it was registered as {m} devID {d}, not {e.kind} devID {e.device}"
            else:
                how = "only part of it was registered"
            out.append(Violation(
                "buffer-not-registered",
                f"{n.node}: {e.name} ({e.group}, {e.kind}, {e.ptr:#x}+{e.nbytes}) is not "
                f"registered: {how}; preparing a transfer of its pages fails "
                "(NIXL_ERR_NOT_FOUND)", n.seq_end))
    return out


@_nixl("unexpected-error")
def check_unexpected(r: NxRecord) -> list[Violation]:
    """register raised in a scenario that expects success."""
    def after(n: NixlNodeRun) -> str:
        failed = [c for c in _registers(r, n) if _failed(c)]
        return f" after {_text(n, failed[0])} raised {_raised(failed[0])}" if failed else ""
    return register_raised(r, after)


@_nixl("not-rolled-back")
def check_rolled_back(r: NxRecord) -> list[Violation]:
    """register raised and left descriptors it registered in the agent."""
    out = []
    for n in r.nodes:
        if n.error is None:
            continue
        made = {(c.args[1].replace("_SEG", ""), d) for c in _registers(r, n) if c.code == 0
                for d in c.args[0]}
        live = {(m, d) for m, rs in n.regs.items() for d in rs}
        left = sorted(made & live, key=lambda x: x[1])
        if left:
            out.append(rollback_left(n, n.error, len(made), [d[0] for _m, d in left]))
    return out


@_nixl("unregister-not-a-live-base")
def check_deregister(r: NxRecord) -> list[Violation]:
    """A deregister_memory whose list matched no live registration (NIXL_ERR_NOT_FOUND, none
    of it released), or named one descriptor twice (the real agent dies)."""
    out = []
    for n in r.nodes:
        for c in _calls(r, n, ("deregister_memory",), n.seq_start):
            if c.result == CRASH:
                why = ("names one descriptor twice: the real agent dies (SIGSEGV, "
                       "docs/nixl.md §3.2)")
            elif c.code == NOT_FOUND and not c.injected:
                why = ("raised NIXL_ERR_NOT_FOUND: a descriptor matches no live registration "
                       "(deregistered already, or never registered) and none of the list "
                       "was deregistered")
            else:
                continue
            out.append(Violation("unregister-not-a-live-base", f"{n.node}: {_text(n, c)} "
                                 f"{why}", c.seq))
    return out


@_nixl("transfer-unregistered")
def check_transfers(r: NxRecord) -> list[Violation]:
    """A peer that could not load an agent's metadata, and a page write that failed, each
    named at the registration that should have allowed it."""
    out = []
    for m in r.metadata_failures:
        n = next(x for x in r.nodes if x.node == m.owner)
        bad = _emptied(r, n)
        kind = bad.args[1].replace("_SEG", "") if bad is not None else ""
        why = (f"{m.owner}'s {_text(n, bad)} raised {_raised(bad)} (seq {bad.seq}): the "
               f"refused registration left an empty {kind} section in the agent's metadata, "
               f"which no peer loads while the agent holds no {kind} registration "
               "(docs/nixl.md §3.3)" if bad is not None else
               f"{m.owner}'s metadata is refused")
        out.append(Violation(
            "transfer-unregistered", f"add_remote_agent of {m.owner}'s metadata on {m.loader} "
            f"raised {status_name(m.status)}, so no transfer between them can be prepared: "
            f"{why}", ORDER_TRANSFER))
    for f in r.transfer_failures:
        n = next(x for x in r.nodes if x.node == f.side)
        entry = next((e for e in n.entries if e.name == f.buffer), None)
        calls = [c for c in _registers(r, n) if entry is not None and any(
            a <= entry.ptr < a + max(s, 1) for a, s, _ in c.args[0])]
        if not calls:
            where = "no registration call of register named it"
        elif _failed(calls[-1]):
            where = (f"{_text(n, calls[-1])} (seq {calls[-1].seq}) named it and raised "
                     f"{_raised(calls[-1])}")
        else:
            where = (f"registered by {_text(n, calls[-1])} (seq {calls[-1].seq}), which does "
                     "not cover it now")
        offset = f.addr - (entry.ptr if entry is not None else f.addr)
        what = (f"lies in a registered descriptor whose MR is invalidated: "
                f"{release_text(f.side)}" if f.invalidated else
                f"is in no registered descriptor; {where}")
        out.append(Violation(
            "transfer-unregistered",
            f"the NIXL WRITE of {f.buffer} page {f.page} failed ({status_name(f.code)}): "
            f"{f.side}'s {f.buffer}+{offset:#x} ({f.nbytes} bytes) {what}", ORDER_TRANSFER))
    return out


def _not_retried(r: NxRecord, n: NixlNodeRun) -> dict[tuple[int, int, int], TraceEntry]:
    """descriptor -> the deregister of the only teardown round that an injected fault
    refused, where the implementation declares no repeatable teardown."""
    if r.repeatable or r.teardown_start is None:
        return {}
    return {d: c for c in _calls(r, n, ("deregister_memory",), r.teardown_start)
            if c.injected and _failed(c) for d in c.args[0]}


@_nixl("leak")
def check_leak(r: NxRecord) -> list[Violation]:
    """A descriptor the implementation registered is still registered after teardown."""
    if r.teardown_start is None or not any(s.startswith("teardown") for s in r.exercised):
        return []
    out: list[Violation] = []
    for n in r.nodes:
        ours = {d for c in _calls(r, n, ("register_memory",)) if c.code == 0 for d in c.args[0]}
        kept = _not_retried(r, n)
        left = [(m, a, s, d) for m, a, s, d in r.live_end.get(n.node, [])
                if (a, s, d) in ours and (a, s, d) not in kept]
        if left:
            names = ", ".join(n.name_at(a) for _m, a, _s, _d in left[:6])
            out.append(Violation(
                "leak", f"{n.node}: after teardown {len(left)} descriptor(s) are still "
                f"registered with the agent: {names}", ORDER_RELEASE + len(out)))
    return out


@_nixl("teardown-raised")
def check_teardown_raised(r: NxRecord) -> list[Violation]:
    """teardown raised with no deregistration having failed."""
    return teardown_raised(r, lambda n: any(
        _failed(c) for c in _calls(r, n, ("deregister_memory",), r.teardown_start or 0)))


@_nixl("unregister-not-retried", emits=WARNING)
def warn_not_retried(r: NxRecord) -> list[Violation]:
    """A descriptor the only teardown round could not release (an injected failure)."""
    out = []
    for n in r.nodes:
        live = {(a, s, d) for _m, a, s, d in r.live_end.get(n.node, [])}
        for d, c in sorted(_not_retried(r, n).items()):
            if d in live:
                out.append(Violation(
                    "unregister-not-retried",
                    f"{n.node}: {n.name_at(d[0])} stays registered: its deregister_memory in "
                    f"the only teardown raised {_raised(c)} and no later teardown retries it "
                    "(the implementation declares no repeatable teardown)", c.seq))
    return out


def _run(r: NxRecord, emits: str) -> list[Violation]:
    out = [v for kind, fn in _CHECKS if kind == emits for v in fn(r)]
    out.sort(key=lambda v: v.seq)
    return out


def check_nixl_run(r: NxRecord) -> list[Violation]:
    """Every NIXL reading of the target's rules, first finding first."""
    return _run(r, VIOLATION)


def nixl_warnings(r: NxRecord) -> list[Violation]:
    """What passes but the report says."""
    return _run(r, WARNING)
