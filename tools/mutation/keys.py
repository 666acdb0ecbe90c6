"""Names for cosmic-ray mutants that hold on any machine and across edits elsewhere in a file.

cosmic-ray gives each mutant a fresh random job id on every ``init``, so neither a sample nor a
list of equivalent mutants can name one by its id. Here a mutant is named by what it changes:

- :func:`position`: (line, column, end line, end column, operator, occurrence) in the module as
  it is now, the order :mod:`sample` draws from, the same on every machine for the same file;
- :func:`key`: ``path | operator | `text` #k | the source line, stripped``, where ``text`` is
  the source the mutation replaces and ``k`` counts the same text earlier on that line. No line
  number and no column: the key survives edits elsewhere in the file and a re-indented line.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any


def position(mutation: Any) -> tuple[int, int, int, int, str, int]:
    (row, col), (end_row, end_col) = mutation.start_pos, mutation.end_pos
    return (row, col, end_row, end_col, mutation.operator_name, int(mutation.occurrence))


def key(mutation: Any, lines: list[str] | None = None) -> str:
    path = str(mutation.module_path)
    if lines is None:
        lines = Path(path).read_text().splitlines()
    (row, col), (end_row, end_col) = mutation.start_pos, mutation.end_pos
    line = lines[row - 1]
    text = line[col:end_col] if end_row == row else line[col:].rstrip() + " …"
    nth = line[:col].count(text) if end_row == row else 0
    return f"{path} | {mutation.operator_name} | `{text}` #{nth} | {line.strip()}"


def blob(path: str) -> str:
    """The file's git blob id (``git hash-object``): which version of the module a seed drew
    from."""
    data = Path(path).read_bytes()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
