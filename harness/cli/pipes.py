"""Standard output whose reader may go away: ``kvreg list | head -1`` ends quietly.

When ``head`` has read what it wants it closes the pipe, and the next write raises
BrokenPipeError. The command's work is not wrong for that: the rest of its report goes to
``/dev/null`` (the recipe of Python's signal documentation: point the stdout descriptor at
devnull, so the interpreter's own flush at exit cannot raise again), the files it was asked to
write (``--json FILE``, ``--svg``, baselines) are still written, and the exit status is the
one the command would have returned.
"""

from __future__ import annotations

import io
import os
import sys
from typing import TextIO, cast

__all__ = ["reader_safe", "stdout_gone"]


def stdout_gone() -> None:
    """Send whatever is still to come on stdout, buffered or not, to /dev/null."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


class _ReaderSafe(io.TextIOBase):
    """Writes to stdout; the first BrokenPipeError sends the rest to /dev/null."""

    def write(self, s: str) -> int:
        try:
            sys.stdout.write(s)
        except BrokenPipeError:
            stdout_gone()
        return len(s)

    def flush(self) -> None:
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            stdout_gone()


def reader_safe() -> TextIO:
    """A stream for a command's report on stdout that survives its reader leaving."""
    return cast(TextIO, _ReaderSafe())
