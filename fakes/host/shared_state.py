"""The host's state as one JSON file that every rank process opens by path.

Each change is one transaction: an exclusive ``fcntl.flock`` on a lock file beside the
state (never renamed, so every process locks the same inode), the state read, changed and
written to a temporary file that ``os.replace`` puts in place. A rank killed mid-change
leaves the previous state whole, and the lock is released by the kernel when its holder
dies (flock(2)) [DOC].
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["SharedState"]


class SharedState:
    """The state file at ``path`` and its lock file ``path + ".lock"``."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.lock_path = Path(f"{self.path}.lock")

    def create(self, state: dict[str, Any]) -> None:
        """Write the first state (replacing any earlier host at this path)."""
        self.lock_path.touch()
        with self._locked():
            self._write(state)

    def exists(self) -> bool:
        return self.path.is_file() and self.lock_path.is_file()

    @contextmanager
    def _locked(self) -> Iterator[None]:
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)           # closing the descriptor releases the lock

    def _read(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.path.read_text())
        return data

    def _write(self, state: dict[str, Any]) -> None:
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(state, separators=(",", ":")))
        os.replace(tmp, self.path)

    def read(self) -> dict[str, Any]:
        """A consistent copy of the state."""
        with self._locked():
            return self._read()

    @contextmanager
    def change(self) -> Iterator[dict[str, Any]]:
        """The state, to change in place; written back when the block ends without raising
        (an exception leaves the state as it was)."""
        with self._locked():
            state = self._read()
            yield state
            self._write(state)
