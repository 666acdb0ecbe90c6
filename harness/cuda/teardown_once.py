"""What a once-only teardown leaves pinned after a failed unregister: a warning, not a leak.

Code that declares no repeatable teardown (harness/run/contract.py) gets one teardown round,
as its own caller gives it one. A chunk whose unregister failed in that round with a failure
that leaves it pinned (the catalog injects one, docs/cuda-runtime.md §3.1) could be released
only by a later round, which the code never promised and the real machine never makes: it
stays pinned until the process exits whether the code kept it or not. The report says so as
the warning ``unregister-not-retried``; what the code did wrong on the way (an interior or
stale pointer, a teardown that raised a TypeError) is judged as before. Such a chunk arises
where a scenario's unregister fault, meant for a rollback, lands in teardown because the
code made no rollback call (one registration per buffer).
"""

from __future__ import annotations

from kvreg.fakes.cuda.cuda_python_face import pointer_arg
from kvreg.fakes.cuda.errors import CUDART_UNLOADING, error_name
from kvreg.fakes.recorder import TraceEntry
from kvreg.harness.run.result import Violation

from .checks import UNREGISTER_APIS, RunRecord

__all__ = ["RULE", "not_retried", "not_retried_warnings"]

RULE = "unregister-not-retried"


def not_retried(record: RunRecord) -> dict[int, TraceEntry]:
    """The live chunks whose last unregister, in the teardown, failed by an injected fault
    that leaves them pinned."""
    if record.teardown_start is None:
        return {}
    last: dict[int, TraceEntry] = {}
    for e in record.trace:
        if e.api in UNREGISTER_APIS and e.seq >= record.teardown_start:
            try:
                last[pointer_arg(e.args[0])] = e
            except TypeError:
                continue    # a pointer the binding refuses never reached the runtime
    live = {ptr for ptr, _ in record.live_end}
    # cudaErrorCudartUnloading is its own warning (unregister-unloading, checks.py)
    return {ptr: e for ptr, e in last.items() if ptr in live and e.injected and e.code
            and e.code != CUDART_UNLOADING}


def _at(record: RunRecord, ptr: int) -> str:
    """``buffer+0xoffset`` as the checks write a chunk base (a registered base lies inside
    its buffer)."""
    for b in record.buffers:
        if b.base <= ptr < b.base + max(b.spec.nbytes, 1):
            return f"{b.spec.name}+{ptr - b.base:#x}"
    return f"{ptr:#x}"


def not_retried_warnings(record: RunRecord, kept: dict[int, tuple[int, TraceEntry]]
                         ) -> list[Violation]:
    """One warning per chunk of ``kept`` (base -> (size, the failed call))."""
    return [Violation(RULE, f"chunk [{_at(record, ptr)}, +{size}) stays registered: its "
                      f"cudaHostUnregister in the only teardown (call #{e.seq + 1}) returned "
                      f"{e.code} {error_name(e.code or 0)}, and no later teardown retries it "
                      "(the implementation declares no repeatable teardown); it stays pinned "
                      "until the process exits", e.seq)
            for ptr, (size, e) in sorted(kept.items())]
