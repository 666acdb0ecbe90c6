"""How far ``kvreg run`` got, on stderr: a ``\\r`` counter on a terminal, lines in a log.

A CI log has no terminal: a counter redrawn with ``\\r`` would be one garbled line there, and
printing nothing leaves a long run silent. Without a terminal (or with ``CI`` set) a line is
written each time another 10 % of the scenarios finished, and at least every few seconds
while scenarios keep finishing; ``--quiet`` writes nothing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TextIO

__all__ = ["LINE_EVERY_PCT", "LINE_EVERY_S", "Reporter", "make_reporter"]

LINE_EVERY_PCT = 10
LINE_EVERY_S = 5.0


class Reporter:
    """Told each finished scenario (``tick(n)``: n of total done); ``close()`` at the end."""

    def __init__(self, stream: TextIO | None, total: int, *, terminal: bool,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stream, self.total, self.terminal, self.clock = stream, total, terminal, clock
        self._last_step = 0             # the last 10 % step a line was written for
        self._last_n = 0
        self._last_time = clock()

    def tick(self, n: int) -> None:
        if self.stream is None:
            return
        if self.terminal:
            self.stream.write(f"\r{n}/{self.total} scenarios")
            self.stream.flush()
            return
        step = n * 100 // LINE_EVERY_PCT // max(self.total, 1)
        now = self.clock()
        if n > self._last_n and (step > self._last_step or now - self._last_time >= LINE_EVERY_S
                                 or n == self.total):
            pct = n * 100 // max(self.total, 1)
            self.stream.write(f"kvreg run: {n}/{self.total} scenarios done ({pct} %)\n")
            self.stream.flush()
            self._last_step, self._last_n, self._last_time = step, n, now

    def close(self) -> None:
        if self.stream is not None and self.terminal:
            self.stream.write("\r" + " " * (2 * len(str(self.total)) + 12) + "\r")
            self.stream.flush()


def make_reporter(stream: TextIO, total: int, *, quiet: bool) -> Reporter:
    """The counter on a terminal (unless ``CI`` is set), lines elsewhere, nothing if quiet."""
    if quiet:
        return Reporter(None, total, terminal=False)
    terminal = stream.isatty() and not os.environ.get("CI")
    return Reporter(stream, total, terminal=terminal)
