"""The rules a Mooncake scenario is judged by: each broken rule is a sentence.

The same rules as the CUDA target's (harness/cuda/checks.py), read from the fake fabric's trace of
``register_buffer`` / ``unregister_buffer`` calls: every MR inside its buffer, failures raised
and rolled back, every page stored and read back (§1.7), every MR released exactly once by its
exact base (§1.5 step 5), nothing left registered. A call above the effective MR limit
(docs/mooncake-verbs.md §1.6) is judged by what came of it, as on the real store: released
Mooncake refuses it with -600 and registers nothing, so it is a fault only where register()
stopped there (``mr-over-limit``); a store that accepts it leaves the transfers to judge.
Messages name the buffer and offset, the call and the ErrorCode, so a user can act on the
first one. Each rule is one function, declared with the registry's decorator
(harness/run/rules.py); :func:`check_mooncake_run` runs this target's functions in order.
"""

from __future__ import annotations

import bisect
import functools
from dataclasses import dataclass, field
from typing import Any

from kvreg.fakes.mooncake.errors import error_name
from kvreg.fakes.recorder import TraceEntry
from kvreg.harness.run.endstate import (
    BufferEnd,
    FailedCall,
    Raised,
    check_error_reported,
    check_registered,
    check_seams_aligned,
    exc_text,
    fell_back,
    fully_registered,
    live_ranges,
    recovered_warnings,
    rollback_phrase,
    teardown_raised,
)
from kvreg.harness.run.rejection import RejectionWords, check_rejection
from kvreg.harness.run.result import Violation
from kvreg.harness.run.rules import (
    ORDER_RELEASE,
    ORDER_SEAMS,
    SITE_CALL,
    SITE_END,
    VIOLATION,
    WARNING,
    declare,
    rule,
    run_rules,
)

from .transfers import IoFailure, PoolBuffer

__all__ = ["McBuffer", "McRecord", "buffer_ends", "check_mooncake_run", "mooncake_warnings",
           "seam_in_uncopied_bytes"]

INVALID = -600
TARGET = "mooncake"      # the target whose rules these are (harness/run/rules.py)


@dataclass
class McBuffer:
    """One buffer's registration through the implementation."""

    pool: PoolBuffer
    granularity: int
    error: BaseException | None = None
    handle: Any = None
    registered: bool = False
    seq_start: int = 0
    seq_end: int = 0
    live_after_error: list[tuple[int, int]] = field(default_factory=list)
    raised: Raised | None = None       # what register raised, as plain data


@dataclass
class McRecord:
    """Everything a Mooncake run produced, for the checks."""

    limit: int
    expect: str
    store_limited: bool                 # the profile's store rejects a buffer above the limit
    buffers: list[McBuffer]
    trace: list[TraceEntry]
    exercised: tuple[str, ...] = ()
    io_failures: list[IoFailure] = field(default_factory=list)
    teardown_errors: list[tuple[int, McBuffer, BaseException]] = field(default_factory=list)
    teardown_start: int | None = None
    live_end: list[tuple[str, int, int]] = field(default_factory=list)   # node, base, size
    budget_hit: int | None = None
    logs: list[str] = field(default_factory=list)
    pinning: str = "required"           # "optional": registering nothing also passes
    seams_matter: bool = True           # False where the store splits slices at MR seams
    # buffer_ends' answer, once the record is complete (the checks and the warnings share it)
    ends: list[BufferEnd] | None = field(default=None, repr=False, compare=False)


def seam_in_uncopied_bytes(r: McRecord, end: BufferEnd, offset: int) -> bool:
    """Whether ``offset`` of ``end``'s buffer lies in bytes no put or get addresses (the DSA
    indexer's spare rows, docs/pools.md §2.5): an MR seam there cuts no object."""
    b = next((b for b in r.buffers if b.pool.label == end.label), None)
    return b is not None and any(not g.copied and g.offset <= offset <= g.end
                                 for g in b.pool.spec.regions)


def _node(e: TraceEntry) -> str:
    return e.face.split(":", 1)[1]


def _where(r: McRecord, node: str, ptr: int) -> str:
    for b in r.buffers:
        p = b.pool
        if p.node == node and p.base <= ptr < p.base + max(p.nbytes, 1):
            return f"{p.label}+{ptr - p.base:#x}"
    return f"{ptr:#x} (outside every pool buffer)"


def _owner(r: McRecord, node: str, ptr: int, size: int) -> McBuffer | None:
    return next((b for b in r.buffers if b.pool.node == node and b.pool.holds(ptr, size)), None)


def _rc(code: int | None) -> str:
    return f"{code} {error_name(code or 0)}"


class _Mc:
    """A record with what several rules read from it, each computed once."""

    def __init__(self, r: McRecord) -> None:
        self.r = r
        self.calls = [e for e in r.trace if e.face.startswith("mooncake:")
                      and e.api in ("register_buffer", "unregister_buffer")]
        self.regs = [e for e in self.calls if e.api == "register_buffer"]
        self.unregs = [e for e in self.calls if e.api == "unregister_buffer"]
        self.ends = buffer_ends(r)
        self.starts = [b.seq_start for b in r.buffers]     # register() windows, in call order
        self.last_failed: dict[int, int] = {}               # buffer index -> its last failed call
        for e in self.regs:
            i = bisect.bisect_right(self.starts, e.seq) - 1
            if e.code and i >= 0 and e.seq < r.buffers[i].seq_end:
                self.last_failed[i] = e.seq

    @functools.cached_property
    def fallback(self) -> bool:
        return fell_back(self.r.pinning, self.ends)

    @functools.cached_property
    def swallowed(self) -> list[tuple[McBuffer, TraceEntry]]:
        """The buffers whose register returned normally after a failed call, not fully
        registered (recovered, or an optional pinning's fallback, is not), with the call."""
        end_of = {(e.label, e.base): e for e in self.ends}
        out = []
        for b in self.r.buffers:
            mine = _failing(self.r, self.regs, b)
            if mine and b.error is None and not self.fallback \
                    and not fully_registered(end_of[b.pool.label, b.pool.base]):
                out.append((b, mine[0]))
        return out


def check_mooncake_run(r: McRecord) -> list[Violation]:
    """All violations of a run, first one first: the mooncake target's rule functions."""
    return run_rules(TARGET, VIOLATION, _Mc(r))


def mooncake_warnings(r: McRecord) -> list[Violation]:
    """Failed register_buffer calls the implementation recovered from."""
    return run_rules(TARGET, WARNING, _Mc(r))


@rule("call-budget", target=TARGET, doc="scenarios/FORMAT.md")
def _call_budget(c: _Mc) -> list[Violation]:
    if c.r.budget_hit is None:
        return []
    return [Violation("call-budget", f"stopped after {c.r.budget_hit} store calls: the "
                      "implementation loops or never finishes", 0)]


@rule("register-size-zero", target=TARGET, doc="docs/mooncake-verbs.md §1.4")
def _size_zero(c: _Mc) -> list[Violation]:
    return [Violation("register-size-zero", f"{_call(c.r, e)} registers 0 bytes (the store "
                      "rejects it with -600 INVALID_PARAMS)", e.seq)
            for e in c.regs if int(e.args[1]) == 0]


@rule("range-outside-buffer", target=TARGET, doc="docs/mooncake-verbs.md §1.5")
def _outside(c: _Mc) -> list[Violation]:
    return [Violation("range-outside-buffer", f"{_call(c.r, e)} is not inside one pool buffer",
                      e.seq)
            for e in c.regs if int(e.args[1]) != 0
            and _owner(c.r, _node(e), int(e.args[0]), int(e.args[1])) is None]


@rule("mr-over-limit", target=TARGET, doc="docs/mooncake-verbs.md §1.6", site=SITE_CALL,
      summary="a `register_buffer` above the effective MR limit (the minimum of "
      "`MC_MAX_MR_SIZE` or its 1 TiB default and every NIC's `max_mr_size`) is a fault only "
      "where the store refused it and register() stopped there; a store that accepts it "
      "leaves the transfers to judge")
def _mr_over_limit(c: _Mc) -> list[Violation]:
    """One pass: a pool of thousands of MRs costs its calls."""
    r, out = c.r, []
    for e in c.regs:
        ptr, size = int(e.args[0]), int(e.args[1])
        if size == 0 or size <= r.limit or _owner(r, _node(e), ptr, size) is None:
            continue
        outcome = _gave_up_over_limit(r, e, c.ends, c.starts, c.last_failed)
        if not outcome:
            continue
        tail = (": released Mooncake rejects it with -600 INVALID_PARAMS and registers "
                "nothing (§1.6)" if e.code == INVALID and not e.injected else "")
        out.append(Violation("mr-over-limit", f"{_call(r, e)} asks for one MR of {size} "
                             f"bytes, above the effective MR limit {r.limit} "
                             "(MC_MAX_MR_SIZE or 1 TiB, lowered to every device's "
                             f"max_mr_size){tail}; {outcome}", e.seq))
    return out


def _call(r: McRecord, e: TraceEntry) -> str:
    return (f"call #{e.seq + 1} register_buffer({_where(r, _node(e), int(e.args[0]))}, "
            f"{int(e.args[1])})")


def _gave_up_over_limit(r: McRecord, e: TraceEntry, ends: list[BufferEnd],
                        starts: list[int], last_failed: dict[int, int]) -> str:
    """What register() made of an over-limit call ``e``, when that is the fault ("" when
    it is not), judged by what came of the call.

    A store that checks the limit (released, §1.5 step 1, §1.6) refuses the call and
    registers nothing: trying the whole buffer and falling back to MR-sized chunks on -600
    is correct, and so is any later failure's rollback; the call is the fault only when it
    is the last failure of its buffer's register() and that buffer did not end registered
    (register() raised it, or returned with the buffer not covered). A store that does not
    check accepted the MR (HEAD splits it into MRs, §1.6): the transfers judge it.
    ``starts`` and ``last_failed``: each register() window's first call, and the last
    failed call in it, by buffer index.
    """
    if not r.store_limited or not e.code:
        return ""
    i = bisect.bisect_right(starts, e.seq) - 1
    if i < 0 or e.seq >= r.buffers[i].seq_end:
        return "it was made outside register()"
    b = r.buffers[i]
    if last_failed.get(i) != e.seq:
        return ""           # a later call failed: register() is judged by that failure
    if b.error is not None:
        return (f"register() of {b.pool.label} gave up there and raised "
                "(register MR-sized chunks instead, or after the refusal)")
    end = next(x for x in ends if x.label == b.pool.label and x.base == b.pool.base)
    if fully_registered(end) or fell_back(r.pinning, ends):
        return ""           # the refusal registered nothing and register() recovered
    return (f"register() of {b.pool.label} returned with the refused bytes unregistered "
            "(register MR-sized chunks instead, or after the refusal)")


def _failing(r: McRecord, regs: list[TraceEntry], b: McBuffer) -> list[TraceEntry]:
    """The failed register_buffer calls of ``b``'s register(), but an over-limit refusal a
    later call went past: the store registered nothing for it (the whole buffer tried first,
    §1.6), so what register() did afterwards is the failure to name."""
    failed = [e for e in regs if e.code and b.seq_start <= e.seq < b.seq_end]
    return [e for i, e in enumerate(failed) if i == len(failed) - 1
            or not (r.store_limited and int(e.args[1]) > r.limit)]


def _explain(r: McRecord, regs: list[TraceEntry], b: McBuffer) -> str:
    assert b.error is not None
    msg = f"register() of {b.pool.label} raised {exc_text(b.error)}"
    failing = _failing(r, regs, b)
    if failing:
        e = failing[0]
        size = int(e.args[1])
        msg += (f"; register_buffer({_where(r, _node(e), int(e.args[0]))}, {size}) "
                f"(call #{e.seq + 1}) returned {_rc(e.code)}"
                + (" [injected]" if e.injected else ""))
        if r.store_limited and size > r.limit and not e.injected:
            msg += (f": one MR of {size} bytes is above the effective limit {r.limit}, which "
                    "released Mooncake rejects (§1.6); register it in chunks")
    return msg


def buffer_ends(r: McRecord) -> list[BufferEnd]:
    """Each buffer as its register left it: the MRs live when teardown began, replayed from
    the trace, the failed register_buffer calls it made, what it raised.

    One pass over the trace and one sort of each node's live MRs; each buffer takes its
    slice of them by bisect (a pool of thousands of MRs costs its MRs, not MRs x buffers).
    Computed once per record (the checks and the warnings both read it)."""
    if r.ends is not None:
        return r.ends
    stop = r.teardown_start if r.teardown_start is not None else 1 << 62
    events: dict[str, list[tuple[str, int, int, bool]]] = {}
    failed_by_node: dict[str, list[TraceEntry]] = {}
    for e in r.trace:
        if e.seq >= stop or e.api not in ("register_buffer", "unregister_buffer") \
                or not e.face.startswith("mooncake:"):
            continue
        node, reg = _node(e), e.api == "register_buffer"
        events.setdefault(node, []).append(("reg" if reg else "unreg", int(e.args[0]),
                                            int(e.args[1]) if reg else 0, e.code == 0))
        if reg and e.code:
            failed_by_node.setdefault(node, []).append(e)
    live_by_node = {node: sorted(live_ranges(ev).items()) for node, ev in events.items()}
    starts_by_node = {node: [q for q, _ in live] for node, live in live_by_node.items()}
    out = []
    for b in r.buffers:
        p = b.pool
        live, starts = live_by_node.get(p.node, []), starts_by_node.get(p.node, [])
        # MRs never overlap: the one before the buffer's base may reach into it
        lo = max(bisect.bisect_left(starts, p.base) - 1, 0)
        hi = bisect.bisect_left(starts, p.base + p.nbytes)
        failed = [FailedCall(e.seq, "register_buffer", int(e.args[0]), int(e.args[1]),
                             int(e.code or 0), error_name(int(e.code or 0)))
                  for e in failed_by_node.get(p.node, []) if b.seq_start <= e.seq < b.seq_end]
        out.append(BufferEnd(p.label, p.base, p.nbytes, b.granularity or None,
                             b.registered and b.error is None, b.raised, b.seq_end,
                             [(q, s) for q, s in live[lo:hi]
                              if q < p.base + p.nbytes and q + s > p.base], failed, "MR"))
    r.ends = out
    return out


@rule("error-swallowed", target=TARGET, doc="docs/mooncake-verbs.md §1.1")
def _swallowed(c: _Mc) -> list[Violation]:
    logged = next((m for m in c.r.logs if m), "")
    return [Violation(
        "error-swallowed",
        f"register_buffer({_where(c.r, _node(e), int(e.args[0]))}, {int(e.args[1])}) "
        f"(call #{e.seq + 1}) returned {_rc(e.code)} but register() of {b.pool.label} "
        "returned normally: the pool would transfer from memory no NIC can reach"
        + (f" (it only logged: {logged!r})" if logged else ""), e.seq)
        for b, e in c.swallowed]


@rule("not-rolled-back", target=TARGET, doc="docs/mooncake-verbs.md §1.5")
def _not_rolled_back(c: _Mc) -> list[Violation]:
    """A register that raised left nothing registered, but what an injected rollback
    failure pinned."""
    r, out = c.r, []
    for b in r.buffers:
        if b.error is None or not b.live_after_error:
            continue
        mine = _failing(r, c.regs, b)
        failed_rollback = {int(x.args[0]) for x in r.trace
                           if x.api == "unregister_buffer" and x.injected
                           and b.seq_start <= x.seq < b.seq_end}
        made = [e for e in r.trace if e.face.startswith("mooncake:") and e.code == 0
                and b.seq_start <= e.seq < b.seq_end and _node(e) == b.pool.node]
        earlier = sum(1 for e in made if e.api == "register_buffer")
        released = sum(1 for e in made if e.api == "unregister_buffer")
        left = [f"[{_where(r, b.pool.node, p)}, +{s})" for p, s in b.live_after_error
                if p not in failed_rollback]
        why = (f" (register_buffer call #{mine[0].seq + 1} returned {_rc(mine[0].code)})"
               if mine else "")
        out += [Violation(
            "not-rolled-back", f"MR [{_where(r, b.pool.node, ptr)}, +{size}) is still "
            f"registered after register() of {b.pool.label} failed{why}: "
            + rollback_phrase(earlier, released, left).replace("chunk(s)", "MR(s)"),
            b.seq_end) for ptr, size in b.live_after_error if ptr not in failed_rollback]
    return out


def _first_raised(r: McRecord) -> McBuffer | None:
    return next((b for b in r.buffers if b.error is not None), None)


@rule("unexpected-error", target=TARGET, doc="scenarios/FORMAT.md")
def _unexpected(c: _Mc) -> list[Violation]:
    r = c.r
    if r.expect == "success" or (r.expect == "register-error"
                                 and not any(e.code for e in c.regs) and r.budget_hit is None):
        b = _first_raised(r)
        if b is not None:
            return [Violation("unexpected-error", _explain(r, c.regs, b), b.seq_end)]
    return []


_WORDS = RejectionWords("object stride", "stride", "MR limit", "MR limit", "register_buffer",
                        ": no seam can keep an object inside one MR, so it must raise "
                        "ValueError before any call")


def _rejection(rule_name: str, c: _Mc) -> list[Violation]:
    return check_rejection(rule_name, _WORDS, c.r.expect, c.r.limit, c.r.buffers,
                           lambda b: b.pool.label, c.regs)


@rule("not-rejected", target=TARGET, doc="harness/run/contract.py")
def _not_rejected(c: _Mc) -> list[Violation]:
    return _rejection("not-rejected", c)


@rule("rejected-too-late", target=TARGET, doc="harness/run/contract.py")
def _too_late(c: _Mc) -> list[Violation]:
    return _rejection("rejected-too-late", c)


@rule("rejected-wrong-error", target=TARGET, doc="harness/run/contract.py")
def _wrong_error(c: _Mc) -> list[Violation]:
    return _rejection("rejected-wrong-error", c)


@rule("registered", target=TARGET, doc="docs/mooncake-verbs.md §1.7")
def _registered(c: _Mc) -> list[Violation]:
    return check_registered(c.ends, c.r.pinning, skip={b.pool.label for b, _ in c.swallowed})


@rule("seams-aligned", target=TARGET, doc="docs/mooncake-verbs.md §1.7")
def _seams_aligned(c: _Mc) -> list[Violation]:
    if not c.r.seams_matter:
        return []
    return check_seams_aligned([e for e in c.ends if e.returned], ORDER_SEAMS,
                               lambda end, x: seam_in_uncopied_bytes(c.r, end, x))


@rule("error-reported", target=TARGET, doc="docs/mooncake-verbs.md §1.4")
def _error_reported(c: _Mc) -> list[Violation]:
    return check_error_reported(c.ends)


declare("round-trip-mismatch", "every page put through the store (or written by RDMA on "
        "the PD path) reads back byte for byte", site=SITE_END)
declare("pd-transfer-failed", "with `pd = true`, every page RDMA-WRITEs from the prefill "
        "node into the decode node through the registered MRs", site=SITE_END)


@rule("transfer-failed", "round-trip-mismatch", "pd-transfer-failed", target=TARGET,
      doc="docs/mooncake-verbs.md §1.7")
def _transfers(c: _Mc) -> list[Violation]:
    """The first failure of each transfer step (store I/O, PD writes), as it named it."""
    return [Violation(f.rule, f.sentence, f.seq) for f in c.r.io_failures]


@rule("unregister-not-a-live-base", target=TARGET, doc="docs/mooncake-verbs.md §1.5")
def _not_live_base(c: _Mc) -> list[Violation]:
    """unregister_buffer only on live bases (§1.5 step 5), each MR released once."""
    live: dict[tuple[str, int], int] = {}
    released: set[tuple[str, int]] = set()
    out = []
    for e in c.calls:
        node, ptr = _node(e), int(e.args[0])
        if e.api == "register_buffer":
            if e.code == 0:
                live[node, ptr] = int(e.args[1])
                released.discard((node, ptr))
            continue
        if e.injected:
            continue
        if e.code == 0:
            live.pop((node, ptr), None)
            released.add((node, ptr))
            continue
        if (node, ptr) in released:
            why = "was already released"
        elif any(n == node and base < ptr < base + size for (n, base), size in live.items()):
            why = "is inside an MR, not its base"
        else:
            why = "was never registered"
        out.append(Violation("unregister-not-a-live-base",
                             f"call #{e.seq + 1} unregister_buffer({_where(c.r, node, ptr)}), "
                             f"which {why}, returned {_rc(e.code)}", e.seq))
    return out


@rule("leak", target=TARGET, doc="docs/mooncake-verbs.md §1.5")
def _leak(c: _Mc) -> list[Violation]:
    """Nothing stays registered at the end, except what an injected rollback failure pinned
    (and what a register that raised left: not-rolled-back)."""
    r = c.r
    if "teardown" not in r.exercised:
        return []
    out = []
    for i, (node, ptr, size) in enumerate(r.live_end):
        b = _owner(r, node, ptr, size)
        if b is not None and b.error is not None:
            continue
        lost = any(e.injected and int(e.args[0]) == ptr and _node(e) == node
                   for e in c.unregs)
        out.append(Violation("leak", f"MR [{_where(r, node, ptr)}, +{size}) was never released"
                             + (": teardown lost track of it after unregister_buffer failed"
                                if lost else " by teardown"), ORDER_RELEASE + i))
    return out


@rule("teardown-raised", target=TARGET, doc="docs/mooncake-verbs.md §7.1")
def _teardown_raised(c: _Mc) -> list[Violation]:
    return teardown_raised([(rnd, b.pool.label, err) for rnd, b, err in c.r.teardown_errors],
                           c.unregs, c.r.teardown_start)


@rule("recovered", target=TARGET, doc="docs/mooncake-verbs.md §1.5", emits=WARNING)
def _recovered(c: _Mc) -> list[Violation]:
    return recovered_warnings(c.ends, lambda end: bool(check_seams_aligned(
        [end], 0, lambda e, x: seam_in_uncopied_bytes(c.r, e, x))))
