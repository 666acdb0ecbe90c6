"""Argument checks shared by the ``kvreg`` subcommands: bad input is one sentence, exit 2.

Every check runs before any work, so a typo in an output path costs nothing and changes
nothing: ``--json /no/such/dir/out.json`` is refused before the first scenario runs, not
after the last one.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import NoReturn

__all__ = ["OneLineParser", "UsageError", "check_output_path", "plain", "positive_int"]


class UsageError(ValueError):
    """A command-line value that cannot work; the message is one sentence for the user."""


class OneLineParser(argparse.ArgumentParser):
    """argparse with its error as one line (``prog: error: ...``) and exit 2, no usage dump."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (``-j 0``, ``--chunk-gb -1`` are refused, not clamped)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def check_output_path(value: str | None, flag: str, *, stdout_ok: bool = False) -> None:
    """Raise UsageError unless ``value`` names a file that can be written (or is None/'-')."""
    if value is None or (stdout_ok and value == "-"):
        return
    if value == "-":
        raise UsageError(f"{flag} -: this option writes a file, not standard output")
    path = Path(value)
    if not value or path.is_dir():
        raise UsageError(f"{flag} {value}: is a folder; give a file name inside it")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.exists():
        raise UsageError(f"{flag} {value}: folder {parent} does not exist")
    if not parent.is_dir():
        raise UsageError(f"{flag} {value}: {parent} is not a folder")
    if path.exists() and not os.access(path, os.W_OK):
        raise UsageError(f"{flag} {value}: the file is not writable")
    if not path.exists() and not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{flag} {value}: folder {parent} is not writable")


def fail(prog: str, message: str) -> int:
    """Print ``prog: error: message`` on stderr and return the usage exit code 2."""
    print(f"{prog}: error: {message}", file=sys.stderr)
    return 2


def plain(text: str) -> str:
    """A docstring as terminal help: reStructuredText literals (double backquotes) become
    single quotes, roles such as :mod:`x` become plain names."""
    text = re.sub(r"``(.+?)``", r"'\1'", text, flags=re.S)
    return re.sub(r":[a-z]+:`~?([^`]+)`", r"\1", text)
