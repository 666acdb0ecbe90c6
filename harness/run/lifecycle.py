"""The life of kvreg's child processes, shared by supervised workers (:mod:`.supervisor`)
and rank processes (harness/ranks): dying with the parent, waiting for an exit, saying what
ended a process, and what to import before forking so that a child starts ready.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import signal
import time
from contextlib import suppress
from typing import Any

from .limits import Limits

__all__ = ["death_reason", "die_with_parent", "exited", "preload"]

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Linux: be killed when the supervisor dies, even by SIGKILL, so that no endless
    implementation outlives kvreg (prctl PR_SET_PDEATHSIG; elsewhere a no-op)."""
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:      # the supervisor died before the request took effect
        os._exit(1)


def exited(process: Any, grace: float) -> bool:
    """Whether ``process`` exits within ``grace`` seconds. Asks for its exit status without
    blocking: its sentinel is no proof of exit when the code closed its inherited fds (then
    ``join`` would wait for ever)."""
    end = time.monotonic() + grace
    while process.exitcode is None:
        if time.monotonic() >= end:
            return False
        time.sleep(0.005)
    return True


def death_reason(exitcode: int | None, *, timed_out: bool, limits: Limits) -> str:
    """What ended a worker, as the start of a verdict's reason."""
    if timed_out:
        return f"the implementation did not finish within {limits.time_text()}"
    if exitcode is None:
        return "the worker process vanished"
    if exitcode >= 0:
        return f"the implementation ended the process with os._exit({exitcode})"
    try:
        sig = signal.Signals(-exitcode)
    except ValueError:
        return f"the implementation's process was killed by signal {-exitcode}"
    text = signal.strsignal(sig) or ""
    return f"the implementation's process was killed by {sig.name}" + (f" ({text})"
                                                                          if text else "")


# what every run imports: torch (for ``torch.cuda.cudart``), and the parts of numpy the copy
# checks load on first use (the page selection's generator; ``np.unique`` imports numpy.ma):
# about a tenth of a second per worker otherwise, paid again by each worker of a run that
# starts one per process configuration
_PRELOAD = ("torch.cuda", "numpy.random", "numpy.ma")


def preload() -> None:
    """Import in the supervisor what every run imports (:data:`_PRELOAD`), so that a forked
    worker, first or replacement, starts ready instead of importing it inside its first
    scenario's time limit."""
    for name in _PRELOAD:
        with suppress(ImportError):
            importlib.import_module(name)
