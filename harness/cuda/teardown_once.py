"""What a once-only teardown leaves pinned after a failed unregister: a warning, not a leak.

Code that declares no repeatable teardown (harness/run/contract.py) gets one teardown round,
as its own caller gives it one. A chunk whose unregister failed in that round with a failure
that leaves it pinned (the catalog injects one, docs/cuda-runtime.md §3.1) could be released
only by a later round, which the code never promised and the real machine never makes: it
stays pinned until the process exits whether the code kept it or not. The report says so as
the warning ``unregister-not-retried`` (a rule of the registry, harness/run/rules.py, whose
function is in checks.py: it reads ``RunRecord.kept``, which the target fills from
:func:`not_retried`); what the code did wrong on the way (an interior or stale pointer, a
teardown that raised a TypeError) is judged as before. Such a chunk arises where a scenario's
unregister fault, meant for a rollback, lands in teardown because the code made no rollback
call (one registration per buffer).
"""

from __future__ import annotations

from kvreg.fakes.cuda.cuda_python_face import pointer_arg
from kvreg.fakes.cuda.errors import CUDART_UNLOADING
from kvreg.fakes.recorder import TraceEntry

from .checks import UNREGISTER_APIS, RunRecord, not_retried_warnings

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
