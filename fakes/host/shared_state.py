"""The host's state as JSON every rank process opens by path, changed in locked transactions.

Each change is one transaction: an exclusive ``fcntl.flock`` on a lock file beside the
state (every process locks the same inode; the kernel releases the lock when its holder
dies, flock(2) [DOC]), the state read, changed and written back. The state is kept in two
slots (the file at ``path`` and ``path + ".1"``), each a header ``<seq> <crc32> <length>``
and the JSON; a change writes the older slot with one ``pwrite``, so a rank killed
mid-write leaves the newer slot whole, and a reader takes the newest slot that checks.
No rename: on ext4 a rename over an existing file flushes its data first, which cost
milliseconds per change.
"""

from __future__ import annotations

import fcntl
import json
import os
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["SharedState"]


class SharedState:
    """The state slots at ``path`` and ``path + ".1"``, and the lock file ``path + ".lock"``."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.slots = (self.path, Path(f"{self.path}.1"))
        self.lock_path = Path(f"{self.path}.lock")
        self._seq = 0

    def create(self, state: dict[str, Any]) -> None:
        """Write the first state (replacing any earlier host at this path)."""
        self.lock_path.touch()
        with self._locked():
            for slot in self.slots:
                slot.write_bytes(b"")
            self._seq = 0
            self._write(state)

    def exists(self) -> bool:
        return all(p.is_file() for p in (*self.slots, self.lock_path))

    @contextmanager
    def _locked(self) -> Iterator[None]:
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)           # closing the descriptor releases the lock

    @staticmethod
    def _slot(path: Path) -> tuple[int, dict[str, Any]] | None:
        """(seq, state) of a slot whose header and checksum agree, else None."""
        data = path.read_bytes()
        head, sep, rest = data.partition(b"\n")
        fields = head.split()
        if not sep or len(fields) != 3 or not all(f.isdigit() for f in fields):
            return None
        seq, crc, length = (int(f) for f in fields)
        body = rest[:length]
        if len(body) != length or zlib.crc32(body) != crc:
            return None
        state: dict[str, Any] = json.loads(body)
        return seq, state

    def _read(self) -> dict[str, Any]:
        found = [s for s in map(self._slot, self.slots) if s is not None]
        if not found:
            raise RuntimeError(f"the fake host's state at {self.path} is unreadable")
        self._seq, state = max(found, key=lambda s: s[0])
        return state

    def _write(self, state: dict[str, Any]) -> None:
        self._seq += 1
        body = json.dumps(state, separators=(",", ":")).encode()
        record = b"%d %d %d\n" % (self._seq, zlib.crc32(body), len(body)) + body
        fd = os.open(self.slots[self._seq % 2], os.O_WRONLY)
        try:
            os.pwrite(fd, record, 0)
        finally:
            os.close(fd)

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
