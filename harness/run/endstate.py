"""Rules that judge the end state of a register, not only its symptoms.

A copy that happens to succeed proves little: a register that pins nothing, or only its
first chunk, leaves every later copy on the pageable path, which is legal and silent. These
rules read what the implementation left behind and what it raised:

- ``registered``: after a register that returned normally, every byte of every buffer the
  pool pins is covered by live registrations exactly once (no gap, no overlap). With
  ``pinning = "optional"`` "nothing registered, no exception, nothing pending" also passes.
- ``seams-aligned``: every seam between two registrations of one buffer lies on a multiple
  of the buffer's copy unit, judged from the registrations themselves.
- ``error-reported``: an exception raised after a failed registration call carries that
  call's error (code, name or string), not a TypeError from a broken error path.
- ``recovered``: a failed call the implementation retried past (fully registered, aligned,
  nothing raised) is a pass, reported as a warning.
- ``error-pending``: a runtime instance still holding a last error after register or
  teardown returned (docs/cuda-runtime.md §6).

The functions take plain data (:class:`BufferEnd`, :class:`FailedCall`, :class:`Raised`),
so the CUDA and the Mooncake checks share them and a record can cross a process boundary.
"""

from __future__ import annotations

import functools
import linecache
import os
import re
import traceback
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import kvreg.fakes

from .result import Violation, whole_message
from .rules import ORDER_PENDING, ORDER_TEARDOWN

__all__ = [
    "PINNING",
    "PRIVATE_READ",
    "PRIVATE_UNREAD",
    "UNDRAINABLE",
    "BufferEnd",
    "FailedCall",
    "Pending",
    "Raised",
    "check_error_pending",
    "check_error_reported",
    "check_registered",
    "check_seams_aligned",
    "coverage_problems",
    "decisive_failure",
    "exc_text",
    "fell_back",
    "fully_registered",
    "live_ranges",
    "mark_superseded",
    "recovered_warnings",
    "rollback_phrase",
    "summarize_exception",
    "teardown_raised",
    "undrainable",
]

PINNING = ("required", "optional")
# exception types that mean the implementation's own code broke, not that it reported a failure
PROGRAMMING_ERRORS = frozenset({"TypeError", "AttributeError", "NameError",
                                "UnboundLocalError", "KeyError", "IndexError",
                                "AssertionError", "ImportError",
                                "ModuleNotFoundError", "ZeroDivisionError", "OverflowError"})
_FAKES = str(Path(kvreg.fakes.__file__).resolve().parent)   # frames there are the fake's
# the exceptions of a chain kept (each message whole); enough to find a code or a name
_MAX_CHAIN = 8


@dataclass(frozen=True)
class Raised:
    """What a register raised, as plain data: the type, every message of the chain
    (the exception, then its ``__cause__`` / ``__context__``), where in the
    implementation it came from, and a ``code`` attribute if it had one.

    ``chain`` holds each message whole (for the report); ``heads`` each message's first
    line, which is what ``error-reported`` reads: the lines after it are often the
    binding's own (torch's "Invoked with: 2" names the argument, not the error)."""

    type_name: str
    chain: tuple[str, ...]
    origin: str = ""
    code_attr: int | None = None
    heads: tuple[str, ...] = ()

    @property
    def first(self) -> str:
        return self.chain[0] if self.chain else self.type_name


@functools.lru_cache(maxsize=4096)
def _in_fakes(filename: str) -> bool:
    """Whether ``filename`` is one of kvreg's fakes, however its path is spelled (kvreg
    imported through a symlinked folder names its frames by the link)."""
    return os.path.realpath(filename).startswith(_FAKES + os.sep)


def _origin(exc: BaseException) -> str:
    """``file.py:LINE: source`` of the innermost frame outside kvreg's own fakes."""
    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ else []
    for fr in reversed(frames):
        if _in_fakes(fr.filename):
            continue
        line = (fr.line or linecache.getline(fr.filename, fr.lineno or 0)).strip()
        return f"{Path(fr.filename).name}:{fr.lineno}: {line}"
    return ""


def exc_text(e: BaseException) -> str:
    """``Type: message`` of an exception, its message whole on one line (just ``Type``
    when it has none)."""
    text = whole_message(e)
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def summarize_exception(exc: BaseException) -> Raised:
    """A picklable summary of ``exc`` and the exceptions it was raised from."""
    chain: list[str] = []
    heads: list[str] = []
    seen: set[int] = set()
    cur: BaseException | None = exc
    code_attr: int | None = None
    while cur is not None and id(cur) not in seen and len(chain) < _MAX_CHAIN:
        seen.add(id(cur))
        text = whole_message(cur)
        chain.append(f"{type(cur).__name__}: {text}" if text else type(cur).__name__)
        head = str(cur).strip().splitlines()[0] if str(cur).strip() else ""
        heads.append(f"{type(cur).__name__}: {head}" if head else type(cur).__name__)
        code = getattr(cur, "code", None)
        if code_attr is None and isinstance(code, int) and not isinstance(code, bool):
            code_attr = code
        cur = cur.__cause__ or cur.__context__
    return Raised(type(exc).__name__, tuple(chain), _origin(exc), code_attr, tuple(heads))


@dataclass(frozen=True)
class FailedCall:
    """A registration call that returned an error."""

    seq: int
    api: str           # "cudaHostRegister", "register_buffer"
    ptr: int
    size: int
    code: int
    name: str          # "cudaErrorMemoryAllocation", "INVALID_PARAMS"
    text: str = ""     # the error string, when the API has one
    # a later call of the same register tried this memory again (mark_superseded): the code
    # moved past this failure, whatever came of the retry
    superseded: bool = False

    def carried_by(self, raised: Raised) -> bool:
        """Whether the raised exception says which error this was."""
        if raised.code_attr == self.code:
            return True
        # a whole number: not part of a word, of a negative or dotted number ("-2", "2.5",
        # "12.2"); a sentence may end on it ("failed with cudaError: 2.", torch's
        # torch/cuda/_pin_memory_utils.py)
        pattern = re.compile(rf"(?<![\w.-]){re.escape(str(self.code))}(?![\w]|\.\d)")
        for msg in raised.heads or raised.chain:
            if self.name and self.name in msg:
                return True
            if self.text and self.text in msg:
                return True
            if pattern.search(msg):
                return True
        return False


def mark_superseded(failed: Sequence[FailedCall],
                    attempts: Iterable[tuple[int, int, int]]) -> list[FailedCall]:
    """``failed`` with ``superseded`` set on each call a later attempt ``(seq, ptr, size)``
    of the same register overlaps: the whole buffer refused and then tried in chunks, a chunk
    retried or split. Such a failure is not what the register ended on (issue 24 §4: judge
    results); one sweep from the last attempt back, over the union of later ranges."""
    if not failed:
        return []
    by_seq = {f.seq: f for f in failed}
    starts: list[int] = []          # disjoint [start, end) spans of later attempts, sorted
    ends: list[int] = []
    out: dict[int, FailedCall] = {}
    for seq, ptr, size in sorted(attempts, reverse=True):
        end = ptr + max(size, 1)
        f = by_seq.get(seq)
        if f is not None:
            i = bisect_right(starts, ptr + max(f.size, 1) - 1)
            hit = i > 0 and ends[i - 1] > ptr
            out[seq] = replace(f, superseded=hit) if hit != f.superseded else f
        lo = bisect_left(ends, ptr)          # first span that may touch [ptr, end)
        hi = bisect_right(starts, end)       # past the last span that may touch it
        if lo < hi:
            ptr, end = min(ptr, starts[lo]), max(end, ends[hi - 1])
        starts[lo:hi], ends[lo:hi] = [ptr], [end]
    return [out.get(f.seq, f) for f in failed]


def decisive_failure(failed: Sequence[FailedCall]) -> FailedCall:
    """The failed call a register's outcome rests on: the first one no later call tried
    again (after the whole buffer was refused and chunks began, a chunk that failed); the
    last one when the code tried past every failure."""
    return next((f for f in failed if not f.superseded), failed[-1])


@dataclass
class BufferEnd:
    """One buffer as the register phase left it."""

    label: str
    base: int
    nbytes: int
    unit: int | None                   # the copy unit seams must respect (None: not judged)
    returned: bool                     # register returned normally
    raised: Raised | None = None
    seq_end: int = 0
    live: list[tuple[int, int]] = field(default_factory=list)   # absolute (ptr, size)
    failed: list[FailedCall] = field(default_factory=list)
    what: str = "registration"         # "registration" or "MR", for messages


def live_ranges(events: Iterable[tuple[str, int, int, bool]]) -> dict[int, int]:
    """Replay ("reg" | "unreg", ptr, size, ok) events in order: the live bases and sizes."""
    live: dict[int, int] = {}
    for kind, ptr, size, ok in events:
        if not ok:
            continue
        if kind == "reg":
            live[ptr] = size
        else:
            live.pop(ptr, None)
    return live


def coverage_problems(b: BufferEnd) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Gaps and doubly-covered spans of ``b`` as (offset, length), each ascending."""
    spans = sorted((max(p - b.base, 0), min(p + s - b.base, b.nbytes)) for p, s in b.live
                   if p < b.base + b.nbytes and p + s > b.base)
    gaps: list[tuple[int, int]] = []
    overlaps: list[tuple[int, int]] = []
    reach = 0
    for start, end in spans:
        if start > reach:
            gaps.append((reach, start - reach))
        elif start < reach:
            overlaps.append((start, min(end, reach) - start))
        reach = max(reach, end)
    if reach < b.nbytes:
        gaps.append((reach, b.nbytes - reach))
    return gaps, overlaps


def fully_registered(b: BufferEnd) -> bool:
    gaps, overlaps = coverage_problems(b)
    return not gaps and not overlaps


def _covered(b: BufferEnd) -> int:
    gaps, _ = coverage_problems(b)
    return b.nbytes - sum(n for _, n in gaps)


def check_registered(buffers: Sequence[BufferEnd], pinning: str,
                     skip: Iterable[str] = ()) -> list[Violation]:
    """The ``registered`` rule over a pool whose every register returned normally.

    ``skip`` names buffers another rule already explains (an error swallowed there).
    """
    if not buffers or not all(b.returned for b in buffers):
        return []
    judged = [b for b in buffers if b.nbytes > 0]
    if pinning == "optional" and all(_covered(b) == 0 for b in judged):
        return []           # the pageable fallback; error-pending judges what it left behind
    skipped = set(skip)
    out: list[Violation] = []
    for b in judged:
        if b.label in skipped:
            continue
        gaps, overlaps = coverage_problems(b)
        covered = b.nbytes - sum(n for _, n in gaps)
        if gaps:
            off, n = gaps[0]
            more = f" (and {len(gaps) - 1} more gap(s))" if len(gaps) > 1 else ""
            if covered == 0:
                head = f"register() of {b.label} returned normally but registered none of its "
                head += f"{b.nbytes} bytes"
            else:
                head = (f"register() of {b.label} returned normally but [{b.label}+{off:#x}, "
                        f"+{n}) is not covered by any live {b.what}{more}: {covered} of "
                        f"{b.nbytes} bytes registered")
            tail = ("; with pinning optional only all or nothing passes" if pinning == "optional"
                    else "; copies from there run on the pageable path")
            out.append(Violation("registered", head + tail, b.seq_end))
        elif overlaps:
            off, n = overlaps[0]
            out.append(Violation("registered", f"bytes [{b.label}+{off:#x}, +{n}) are covered "
                                 f"by two live {b.what}s after register() of {b.label} "
                                 "returned: each byte must be registered exactly once",
                                 b.seq_end))
    return out


def check_seams_aligned(buffers: Sequence[BufferEnd], seq: int,
                        cuts_nothing: Callable[[BufferEnd, int], bool] | None = None
                        ) -> list[Violation]:
    """Each seam between two live registrations of a buffer on a multiple of its unit.

    ``cuts_nothing(buffer, offset)`` drops a seam no transfer crosses (bytes never copied).
    """
    out: list[Violation] = []
    for b in buffers:
        if b.unit is None or b.unit <= 0 or len(b.live) < 2:
            continue
        inside = sorted((p - b.base, s) for p, s in b.live
                        if p >= b.base and p + s <= b.base + b.nbytes)
        seams = sorted({off for off, _ in inside if off > 0}
                       | {off + s for off, s in inside if off + s < b.nbytes})
        bad = [x for x in seams if x % b.unit
               and not (cuts_nothing is not None and cuts_nothing(b, x))]
        if not bad:
            continue
        x = bad[0]
        page = x // b.unit
        more = f" ({len(bad) - 1} more misaligned seam(s))" if len(bad) > 1 else ""
        out.append(Violation(
            "seams-aligned", f"a seam between two {b.what}s of {b.label} lies at offset {x} "
            f"({b.label}+{x:#x}), which cuts copy page {page} [{page * b.unit}, "
            f"{(page + 1) * b.unit}) of {b.unit} bytes: {x % b.unit} bytes into it{more}",
            seq))
    return out


def check_error_reported(buffers: Sequence[BufferEnd]) -> list[Violation]:
    """A register that raised after a failed call must say which error it was."""
    out: list[Violation] = []
    for b in buffers:
        if b.raised is None or not b.failed:
            continue
        # the failure register ended on, or an earlier try of that very call (a retry)
        call = decisive_failure(b.failed)
        if any(f.carried_by(b.raised) for f in b.failed if f is call
               or (f.ptr, f.size, f.api) == (call.ptr, call.size, call.api)):
            continue
        what = f"{call.name} ({call.code}" + (f", {call.text})" if call.text else ")")
        where = f"{call.api}({b.label}+{call.ptr - b.base:#x}, {call.size}) (call #{call.seq + 1})"
        if b.raised.type_name in PROGRAMMING_ERRORS:
            src = f" from {b.raised.origin}" if b.raised.origin else ""
            msg = (f"register() of {b.label} raised {b.raised.first}{src} instead of reporting "
                   f"{what} returned by {where}: its error path is broken and hides the real "
                   "failure")
        else:
            msg = (f"register() of {b.label} raised {b.raised.first}, which does not name "
                   f"{what} returned by {where}: say the failing code, its name or its string")
        out.append(Violation("error-reported", msg, b.seq_end))
    return out


def recovered_warnings(buffers: Sequence[BufferEnd],
                       seams_cut: Callable[[BufferEnd], bool] | None = None
                       ) -> list[Violation]:
    """Failed calls a register retried past: fully registered, aligned, nothing raised.

    ``seams_cut`` says whether a buffer's seams cut a copy (default: any seam off its unit);
    the CUDA target passes its own, which ignores seams no copy crosses.
    """
    out: list[Violation] = []
    for b in buffers:
        # an empty buffer is trivially "fully registered": nothing was recovered there
        if not b.failed or not b.returned or b.nbytes == 0 or not fully_registered(b):
            continue
        if seams_cut(b) if seams_cut is not None else check_seams_aligned([b], 0):
            continue
        call = b.failed[0]
        out.append(Violation(
            "recovered", f"{call.api}({b.label}+{call.ptr - b.base:#x}, {call.size}) (call "
            f"#{call.seq + 1}) returned {call.code} {call.name}"
            + (f" and {len(b.failed) - 1} more call(s) failed" if len(b.failed) > 1 else "")
            + f"; register() recovered: {b.label} ended fully registered in "
            f"{len(b.live)} {b.what}(s) on "
            + ("aligned seams" if not check_seams_aligned([b], 0) else
               "seams no copy crosses"), call.seq))
    return out


def rollback_phrase(earlier: int, released: int, left: Sequence[str]) -> str:
    """"no rollback" or "partial rollback", naming what is left registered."""
    still = ", ".join(left[:4]) + (f" and {len(left) - 4} more" if len(left) > 4 else "")
    if released == 0:
        return (f"no rollback (none of its {earlier} earlier chunk(s) was released; still "
                f"registered: {still})")
    return (f"partial rollback (released {released} of {earlier} earlier chunk(s); still "
            f"registered: {still})")


@dataclass(frozen=True)
class Pending:
    """A runtime instance's last error as kvreg found it after a step returned."""

    step: str          # "register" or "teardown"
    runtime: str       # "torch", "cuda-bindings" or "libcudart" (a ctypes handle)
    code: int
    name: str
    returned: bool = True   # False: the step raised (register() of a buffer, a teardown)
    # a libcudart instance apart from torch's (docs/cuda-runtime.md §6.1): no kernel-launch
    # check of torch's reads it; whether anything else does is [UNC] (§6.2)
    private: bool = False


# the end of the warning for an error torch's binding cannot drain: how reports recognise it
# (said once per run as a hint, harness/run/causes.py; the JSON keeps every instance)
UNDRAINABLE = "(torch's binding has no cudaGetLastError to drain it)"


def undrainable(v: Violation) -> bool:
    """Whether ``v`` is the warning for an error left pending where torch's binding offers
    no way to drain it: the same for every correct implementation through that binding."""
    return v.rule == "error-pending" and v.message.endswith(UNDRAINABLE)


# how a verdict on a private libcudart instance names the [UNC] option it rests on
PRIVATE_UNREAD = ('[UNC] docs/cuda-runtime.md §6.2: the device profile has '
                  'private_cudart_error = "unread"; a scenario with profile_options = '
                  '{ private_cudart_error = "read" } fails it')
PRIVATE_READ = ('[UNC] docs/cuda-runtime.md §6.2: the device profile has '
                'private_cudart_error = "read"')


def check_error_pending(pending: Sequence[Pending], *, fallback: bool,
                        private_read: bool = False
                        ) -> tuple[list[Violation], list[Violation]]:
    """(violations, warnings) for errors left pending in a runtime instance.

    A pending error in cuda-bindings' instance, or in torch's reached through a ctypes
    handle, fails: the code could drain it with cudaGetLastError. One in torch's instance
    through torch's binding is a warning, because that binding offers no way to drain it
    (docs/cuda-runtime.md §6) — except after an optional pinning fell back to pageable
    memory, where "nothing pending" is part of the pass. One in a private libcudart (a
    ctypes handle the loader mapped apart from torch's, §6.1) is read by no kernel-launch
    check of torch's: a warning, unless ``private_read`` (the [UNC] option of §6.2) says
    another component of the process reads it.
    """
    violations: list[Violation] = []
    warnings: list[Violation] = []
    seen: set[tuple[str, bool, int]] = set()
    for p in pending:
        if not p.code or (p.runtime, p.private, p.code) in seen:
            continue
        seen.add((p.runtime, p.private, p.code))
        when = f"after {p.step} {'returned' if p.returned else 'raised'}"
        if p.private:
            text = (f"{when}, {p.runtime}'s runtime (a libcudart loaded apart from torch's) "
                    f"still holds {p.name} ({p.code}) as its last error")
            if private_read:
                violations.append(Violation("error-pending", f"{text}: the next last-error "
                                            "check through that library reports it against "
                                            f"an unrelated call under {PRIVATE_READ}; drain "
                                            "it with cudaGetLastError through the same "
                                            "runtime", ORDER_PENDING))
            else:
                warnings.append(Violation("error-pending", f"{text}; no kernel-launch check "
                                          "of torch's reads that instance, only handles that "
                                          f"open the same library ({PRIVATE_UNREAD}); drain "
                                          "it with cudaGetLastError through the same handle",
                                          ORDER_PENDING))
            continue
        head = (f"{when}, {p.runtime}'s "
                f"runtime still holds {p.name} "
                f"({p.code}) as its last error: the next kernel-launch check reports it "
                "against an unrelated op")
        if p.runtime != "torch":
            violations.append(Violation("error-pending", head + "; drain it with "
                                        "cudaGetLastError through the same runtime", ORDER_PENDING))
        elif fallback:
            violations.append(Violation("error-pending", head + "; a pageable fallback must "
                                        "leave nothing pending: register and drain through "
                                        "one runtime that has cudaGetLastError (cuda-python) "
                                        "or use cuMemHostRegister", ORDER_PENDING))
        else:
            warnings.append(Violation("error-pending", f"{head} {UNDRAINABLE}", ORDER_PENDING))
    return violations, warnings


def fell_back(pinning: str, ends: Sequence[BufferEnd]) -> bool:
    """An optional pinning that registered nothing and raised nothing: the pageable
    fallback."""
    return (pinning == "optional" and bool(ends) and all(e.returned for e in ends)
            and not any(e.live for e in ends))


def teardown_raised(errors: Iterable[tuple[int, str, BaseException]],
                    unregisters: Sequence[Any], teardown_start: int | None
                    ) -> list[Violation]:
    """``teardown-raised`` for each (round, buffer, exception) a teardown raised: acceptable
    only to report an injected unregister failure (``unregisters``: the trace's unregister
    calls); a TypeError and its kin are the code's own bug whatever else went wrong (its
    other rules fire too)."""
    injected = teardown_start is not None and any(
        e.injected for e in unregisters if e.seq >= teardown_start)
    return [Violation("teardown-raised", f"teardown #{rnd + 1} of {label} raised "
                      f"{exc_text(err)}", ORDER_TEARDOWN)
            for rnd, label, err in errors
            if not injected or type(err).__name__ in PROGRAMMING_ERRORS]
