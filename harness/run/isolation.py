"""What every run puts back whatever the implementation does: environment, logs, a wall stop.

Every target runs its steps inside these, so a target never borrows them from another. The
process boundary around a run (worker processes, their limits) is :mod:`.supervisor`'s.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .limits import TimeLimitExceeded

__all__ = ["capture_logs", "env_var", "wall_guard"]


@contextmanager
def env_var(name: str, value: str | None) -> Iterator[None]:
    """Set (or, with None, unset) one environment variable for the block, then restore it."""
    old = os.environ.get(name)
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


class LogCapture(logging.Handler):
    """Keep what the implementation logs: "errors only logged" is a bug kvreg names."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@contextmanager
def capture_logs() -> Iterator[list[str]]:
    """The warnings and errors logged during the block, in order."""
    handler = LogCapture()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield handler.messages
    finally:
        root.removeHandler(handler)


@contextmanager
def wall_guard(seconds: float | None) -> Iterator[None]:
    """Stop a run in this process after ``seconds`` (SIGALRM; main thread only).

    Only an unsupervised run needs it (``kvreg run --in-process``); a supervised worker is
    stopped by its supervisor, which also stops loops that never return to Python. None:
    no stop.
    """
    if seconds is None or threading.current_thread() is not threading.main_thread() or \
            not hasattr(signal, "SIGALRM"):
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        raise TimeLimitExceeded(seconds)

    old = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
