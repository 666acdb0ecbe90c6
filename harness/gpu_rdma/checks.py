"""The rules a ``gpu_rdma`` scenario is judged by, each read from the fake fabric's trace
and the engines' state as the real Transfer Engine would leave them (docs/gpu-rdma.md §4).

Every rule rests on what the real engine does next: a buffer missing from an engine's
published segment fails every transfer that touches it (-1, docs/mooncake-verbs.md §8.4); a
batch with a zero-length or self-overlapping entry is refused from v0.3.12 (#2854); an
unregister of anything but a live base is -3. Each rule is one function declared with the
registry's decorator (harness/run/rules.py); :func:`check_gpu_rdma_run` runs them in order.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kvreg.fakes.mooncake.errors import TeError
from kvreg.fakes.recorder import TraceEntry
from kvreg.harness.run.endstate import exc_text
from kvreg.harness.run.result import Violation
from kvreg.harness.run.rules import (
    ORDER_RELEASE,
    ORDER_TEARDOWN,
    ORDER_TRANSFER,
    SITE_CALL,
    SITE_END,
    VIOLATION,
    WARNING,
    rule,
    run_rules,
)

from .buffers import KvBuffer
from .memory_saver import release_text
from .record import BaseNodeRun, BaseRecord

__all__ = ["GrRecord", "NodeRun", "Published", "check_gpu_rdma_run", "gpu_rdma_warnings"]

TARGET = "gpu_rdma"
DOC = "docs/gpu-rdma.md §4"
REGISTER_APIS = ("register_memory", "batch_register_memory")
UNREGISTER_APIS = ("unregister_memory", "batch_unregister_memory")
NOT_REGISTERED = int(TeError.ERR_ADDRESS_NOT_REGISTERED)


def code_text(code: int) -> str:
    """``-7`` -> ``-7 (ERR_ADDRESS_OVERLAPPED)``."""
    try:
        return f"{code} ({TeError(code).name})"
    except ValueError:
        return str(code)


@dataclass(frozen=True)
class Published:
    """A buffer an engine published, and the NICs it has an MR on."""

    addr: int
    length: int
    nics: frozenset[str]

    def holds(self, addr: int, nbytes: int) -> bool:
        return self.addr <= addr and addr + max(nbytes, 1) <= self.addr + self.length


@dataclass
class NodeRun(BaseNodeRun):
    """One node's registration through the implementation, with its engine's NICs."""

    nics: tuple[str, ...]
    published: list[Published] = field(default_factory=list)    # right after register
    regions: dict[int, int] = field(default_factory=dict)       # the engine's map then

    def covered(self, e: KvBuffer) -> Published | None:
        return next((p for p in self.published if p.holds(e.ptr, e.nbytes)), None)


@dataclass
class GrRecord(BaseRecord[NodeRun, tuple[int, int]]):
    """Everything a gpu_rdma run produced, for the checks (``live_end``: each node's
    engine's (base, length) regions after teardown)."""


def _calls(r: GrRecord, n: NodeRun, apis: tuple[str, ...], lo: int = 0,
           hi: int | None = None) -> list[TraceEntry]:
    return r.calls(f"mooncake.engine:{n.node}", apis, lo, hi)


def _register_calls(r: GrRecord, n: NodeRun) -> list[TraceEntry]:
    return _calls(r, n, REGISTER_APIS, n.seq_start, n.seq_end)


def _entries_of(call: TraceEntry) -> list[tuple[int, int]]:
    if call.api == "batch_register_memory":
        addrs, sizes = call.args
        return list(zip(addrs, sizes, strict=True))
    return [(call.args[0], call.args[1])]


def _call_text(n: NodeRun, call: TraceEntry) -> str:
    entries = _entries_of(call)
    if call.api == "batch_register_memory":
        names = ", ".join(n.name_at(a) for a, _ in entries[:4])
        more = f", ... ({len(entries)} entries)" if len(entries) > 4 else ""
        return f"batch_register_memory([{names}{more}])"
    return f"{call.api}({n.name_at(entries[0][0])}, {entries[0][1]})"


def _silent(r: GrRecord, n: NodeRun, e: KvBuffer) -> TraceEntry | None:
    """The batch that returned 0 while the transport failed ``e`` (the region is in the
    engine's map, nothing is published: Mooncake before v0.3.12, #2869)."""
    if e.ptr not in n.regions or n.covered(e) is not None:
        return None
    return next((c for c in _register_calls(r, n) if c.code == 0
                 and c.api == "batch_register_memory" and any(a == e.ptr for a, _ in
                                                              _entries_of(c))), None)


@rule("registration-failure-dropped", target=TARGET, doc=DOC,
      summary="register returned normally although a registration failed: an engine call "
      "returned nonzero, or a batch returned 0 while its RDMA transport failed a buffer "
      "(Mooncake before v0.3.12, #2869: the region is in the engine's map with no MR), and "
      "that buffer is not registered; every transfer touching it fails", site=SITE_CALL)
def check_failure_dropped(r: GrRecord) -> list[Violation]:
    out = []
    for n in r.nodes:
        if not n.registered:
            continue
        missing = [e for e in n.entries if n.covered(e) is None]
        if not missing:
            continue
        failed = [c for c in _register_calls(r, n) if c.code not in (None, 0)]
        if failed:
            c = failed[0]
            out.append(Violation(
                "registration-failure-dropped",
                f"{n.node}: {_call_text(n, c)} returned {code_text(int(c.code or 0))} and "
                f"register returned normally; {len(missing)} buffer(s) are not registered "
                f"({', '.join(e.name for e in missing[:4])}), so their transfers fail",
                c.seq))
            continue
        for e in missing:
            batch = _silent(r, n, e)
            if batch is not None:
                out.append(Violation(
                    "registration-failure-dropped",
                    f"{n.node}: {_call_text(n, batch)} returned 0 but its RDMA transport failed "
                    f"{e.name} ({e.kind}, {e.nbytes} bytes): the engine logged a warning and "
                    "kept the region with no MR (Mooncake before v0.3.12, #2869); register "
                    "every buffer with register_memory, or check each one, on such engines",
                    batch.seq))
                break
    return out


@rule("buffer-not-registered", target=TARGET, doc=DOC,
      summary="after register returned normally, every buffer it was given (kv, aux and "
      "state) lies inside one buffer the engine published, with an MR on every NIC the "
      "engine uses; a buffer never named (a forgotten aux or state group) fails here",
      site=SITE_END)
def check_buffer_registered(r: GrRecord) -> list[Violation]:
    out = []
    for n in r.nodes:
        if not n.registered or any(c.code not in (None, 0) for c in _register_calls(r, n)):
            continue
        for e in n.entries:
            pub = n.covered(e)
            if pub is None:
                if _silent(r, n, e) is not None:
                    continue
                named = any(a <= e.ptr < a + s for c in _register_calls(r, n)
                            for a, s in _entries_of(c))
                how = ("only part of it was registered" if named else
                       f"no registration call named it (its group {e.group!r})")
                out.append(Violation(
                    "buffer-not-registered",
                    f"{n.node}: {e.name} ({e.group}, {e.kind}, {e.ptr:#x}+{e.nbytes}) is not "
                    f"registered: {how}; a transfer of its pages fails (-1)",
                    n.seq_end))
            elif missing := [nic for nic in n.nics if nic not in pub.nics]:
                out.append(Violation(
                    "buffer-not-registered",
                    f"{n.node}: {e.name} has no MR on {', '.join(missing)}: a transfer the "
                    "engine routes through that NIC fails", n.seq_end))
    return out


@rule("batch-entry-invalid", target=TARGET, doc=DOC,
      summary="no registration call names a zero-length entry or two entries that overlap "
      "each other: Mooncake v0.3.12 and later refuse such a batch whole (-1, -7; #2854), "
      "older ones accepted it", site=SITE_CALL)
def check_batch_entries(r: GrRecord) -> list[Violation]:
    out = []
    for n in r.nodes:
        for c in _register_calls(r, n):
            entries = _entries_of(c)
            zero = [a for a, s in entries if s == 0]
            ordered = sorted(entries)
            overlap = next(((a, b) for a, b in itertools.pairwise(ordered)
                            if a[1] and b[1] and b[0] < a[0] + a[1]), None)
            if zero:
                why = f"a zero-length entry at {n.name_at(zero[0])}"
            elif overlap is not None:
                why = (f"entries {n.name_at(overlap[0][0])} (+{overlap[0][1]}) and "
                       f"{n.name_at(overlap[1][0])} overlap")
            else:
                continue
            out.append(Violation(
                "batch-entry-invalid",
                f"{n.node}: {_call_text(n, c)} has {why} (returned {code_text(int(c.code or 0))}"
                "; v0.3.12+ refuses the whole batch, #2854)", c.seq))
    return out


@rule("unexpected-error", target=TARGET, doc=DOC)
def check_unexpected(r: GrRecord) -> list[Violation]:
    def after(n: NodeRun) -> str:
        failed = [c for c in _register_calls(r, n) if c.code not in (None, 0)]
        return (f" after {_call_text(n, failed[0])} returned "
                f"{code_text(int(failed[0].code or 0))}" if failed else "")
    return register_raised(r, after)


def register_raised(r: BaseRecord[Any, Any], after: Callable[[Any], str]) -> list[Violation]:
    """``unexpected-error`` (either transport): register raised in a scenario that expects
    success; ``after(node run)`` says which registration failed before it ("" for none)."""
    if r.expect != "success":
        return []
    return [Violation("unexpected-error", f"{n.node}: register raised "
                      f"{exc_text(n.error)}{after(n)}", n.seq_end)
            for n in r.nodes if n.error is not None]


@rule("not-rolled-back", target=TARGET, doc=DOC)
def check_rolled_back(r: GrRecord) -> list[Violation]:
    out = []
    for n in r.nodes:
        if n.error is None:
            continue
        made = {a for c in _register_calls(r, n) if c.code == 0 for a, _ in _entries_of(c)}
        left = sorted(a for a in n.regions if a in made)
        if left:
            out.append(rollback_left(n, n.error, len(made), left))
    return out


def rollback_left(n: BaseNodeRun, error: BaseException, made: int,
                  left: list[int]) -> Violation:
    """``not-rolled-back`` (either transport): register raised ``error`` with ``left``
    (addresses, in order) of the ``made`` registrations it made still live."""
    phrase = "no rollback" if len(left) == made else \
        f"partial rollback (released {made - len(left)} of {made})"
    return Violation(
        "not-rolled-back",
        f"{n.node}: register raised {exc_text(error)} with {phrase}: still "
        f"registered {', '.join(n.name_at(a) for a in left[:6])}"
        + (f" and {len(left) - 6} more" if len(left) > 6 else ""), n.seq_end)


@rule("unregister-not-a-live-base", target=TARGET, doc=DOC)
def check_unregister(r: GrRecord) -> list[Violation]:
    out = []
    for n in r.nodes:
        for c in _calls(r, n, UNREGISTER_APIS, n.seq_start):
            if c.code == NOT_REGISTERED and not c.injected:
                addrs = c.args[0] if c.api == "batch_unregister_memory" else (c.args[0],)
                out.append(Violation(
                    "unregister-not-a-live-base",
                    f"{n.node}: {c.api}({', '.join(n.name_at(a) for a in addrs[:4])}) returned "
                    f"{code_text(NOT_REGISTERED)}: not the base of a live registration "
                    "(released already, or never registered)", c.seq))
    return out


@rule("transfer-unregistered", target=TARGET, doc=DOC,
      summary="every page the transfers write from prefill to decode lies inside one buffer "
      "each engine published (the engine's check, docs/mooncake-verbs.md §8.4); a failed "
      "write is named at the registration that should have covered its page",
      site=SITE_END)
def check_transfers(r: GrRecord) -> list[Violation]:
    out = []
    for f in r.transfer_failures:
        n = next(x for x in r.nodes if x.node == f.side)
        entry = next((e for e in n.entries if e.name == f.buffer), None)
        calls = [c for c in _register_calls(r, n)
                 if entry is not None and any(a <= entry.ptr < a + max(s, 1)
                                              for a, s in _entries_of(c))]
        if calls:
            c = calls[-1]
            where = (f"registered by {_call_text(n, c)} (seq {c.seq}, returned "
                     f"{code_text(int(c.code or 0))}), which does not cover it now")
        else:
            where = "no registration call of register named it"
        offset = f.addr - (entry.ptr if entry is not None else f.addr)
        if f.invalidated:
            again = [c for c in _calls(r, n, REGISTER_APIS, n.seq_end) if entry is not None
                     and any(a <= entry.ptr < a + max(sz, 1) for a, sz in _entries_of(c))]
            tried = (f"; {_call_text(n, again[-1])} after resume returned "
                     f"{code_text(int(again[-1].code or 0))}" if again else "")
            out.append(Violation(
                "transfer-unregistered",
                f"batch_transfer_sync_write of {f.buffer} page {f.page} failed "
                f"({code_text(f.code)}): {f.side}'s {f.buffer}+{offset:#x} ({f.nbytes} bytes) "
                f"lies in a published buffer whose MR is invalidated: {release_text(f.side)}"
                f"{tried}",
                ORDER_TRANSFER))
            continue
        out.append(Violation(
            "transfer-unregistered",
            f"batch_transfer_sync_write of {f.buffer} page {f.page} failed "
            f"({code_text(f.code)}): {f.side}'s {f.buffer}+{offset:#x}"
            f" ({f.nbytes} bytes) is in no registered buffer; {where}",
            ORDER_TRANSFER))
    return out


def _not_retried(r: GrRecord, n: NodeRun) -> dict[int, TraceEntry]:
    """base -> the unregister of the only teardown round that an injected fault refused,
    where the implementation declares no repeatable teardown: only a later round could
    release it."""
    if r.repeatable or r.teardown_start is None:
        return {}
    out = {}
    for c in _calls(r, n, UNREGISTER_APIS, r.teardown_start):
        if c.injected and c.code not in (None, 0):
            for a in (c.args[0] if c.api == "batch_unregister_memory" else (c.args[0],)):
                out[a] = c
    return out


@rule("leak", target=TARGET, doc=DOC)
def check_leak(r: GrRecord) -> list[Violation]:
    if r.teardown_start is None or not any(s.startswith("teardown") for s in r.exercised):
        return []
    out: list[Violation] = []
    for n in r.nodes:
        ours = {a for c in _calls(r, n, REGISTER_APIS) if c.code == 0 for a, _ in
                _entries_of(c)}
        kept = _not_retried(r, n)
        left = [(a, s) for a, s in r.live_end.get(n.node, []) if a in ours and a not in kept]
        if left:
            out.append(Violation(
                "leak", f"{n.node}: after teardown {len(left)} registration(s) are still in "
                f"the engine: {', '.join(n.name_at(a) for a, _ in left[:6])}",
                ORDER_RELEASE + len(out)))
    return out


@rule("teardown-raised", target=TARGET, doc=DOC)
def check_teardown_raised(r: GrRecord) -> list[Violation]:
    return teardown_raised(r, lambda n: any(
        c.code not in (None, 0) for c in _calls(r, n, UNREGISTER_APIS, r.teardown_start or 0)))


def teardown_raised(r: BaseRecord[Any, Any],
                    release_failed: Callable[[Any], bool]) -> list[Violation]:
    """``teardown-raised`` (either transport): each teardown round that raised where no
    release of its node failed (``release_failed``), or raised a programming error."""
    out = []
    for round_, node, exc in r.teardown_errors:
        n = next(x for x in r.nodes if x.node == node)
        if release_failed(n) and not isinstance(exc, TypeError | AttributeError | NameError):
            continue
        out.append(Violation("teardown-raised", f"{node}: teardown round {round_ + 1} raised "
                             f"{exc_text(exc)}", ORDER_TEARDOWN))
    return out


@rule("unregister-not-retried", target=TARGET, doc=DOC, emits=WARNING)
def warn_not_retried(r: GrRecord) -> list[Violation]:
    """A buffer the only teardown round could not release (an injected unregister failure)
    stays registered until the process exits: not a leak of code that declares one round."""
    out = []
    for n in r.nodes:
        live = {a for a, _ in r.live_end.get(n.node, [])}
        for a, c in sorted(_not_retried(r, n).items()):
            if a in live:
                out.append(Violation(
                    "unregister-not-retried",
                    f"{n.node}: {n.name_at(a)} stays registered: its {c.api} in the only "
                    f"teardown returned {code_text(int(c.code or 0))} and no later teardown "
                    "retries it (the implementation declares no repeatable teardown)", c.seq))
    return out


def check_gpu_rdma_run(r: GrRecord) -> list[Violation]:
    """Every rule of this target, first finding first."""
    return run_rules(TARGET, VIOLATION, r)


def gpu_rdma_warnings(r: GrRecord) -> list[Violation]:
    """What passes but the report says."""
    return run_rules(TARGET, WARNING, r)
