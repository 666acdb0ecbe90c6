"""The host's state as JSON every rank process opens by path, changed in locked transactions.

Each change is one transaction: an exclusive ``fcntl.flock`` on a lock file beside the
state (every process locks the same inode; the kernel releases the lock when its holder
dies, flock(2) [DOC]), the state read, changed and written back. The state is kept in two
slots (the file at ``path`` and ``path + ".1"``), each a header ``<seq> <crc32> <length>``
and the JSON; a change writes the older slot with one ``pwrite``, so a rank killed
mid-write leaves the newer slot whole, and a reader takes the newest slot that checks.
No rename: on ext4 a rename over an existing file flushes its data first, which cost
milliseconds per change. Several changes kvreg makes in one step (a shared region's file
created, sized and mapped) are one transaction (:meth:`SharedState.batch`). A process keeps
its descriptors of the three files open (opened again after a fork: a ``flock`` is held by
an open file description, which a fork shares, and its threads share, so they take turns on
a mutex first), so a transaction is a lock, two ``pread``, one ``pwrite`` and an unlock.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import weakref
import zlib
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

__all__ = ["SharedState"]

_READ_HINT = 1 << 16     # bytes read from a slot at once; a larger state takes a second read


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        with suppress(OSError):
            os.close(fd)
    fds.clear()


class SharedState:
    """The state slots at ``path`` and ``path + ".1"``, and the lock file ``path + ".lock"``."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.slots = (self.path, Path(f"{self.path}.1"))
        self.lock_path = Path(f"{self.path}.lock")
        self._seq = 0
        self._fds: list[int] = []          # lock, slot 0, slot 1: this process's
        self._pid = 0
        self._mutex = threading.Lock()
        self._batch: tuple[int, dict[str, Any]] | None = None   # (thread, state) of a batch
        weakref.finalize(self, _close_all, self._fds)

    def create(self, state: dict[str, Any]) -> None:
        """Write the first state (replacing any earlier host at this path)."""
        self.lock_path.touch()
        for slot in self.slots:
            if not slot.exists():
                slot.write_bytes(b"")
        with self._locked() as (_, *slots):
            for fd in slots:
                os.ftruncate(fd, 0)
            self._seq = 0
            self._write(state)

    def exists(self) -> bool:
        return all(p.is_file() for p in (*self.slots, self.lock_path))

    def close(self) -> None:
        """Close this process's descriptors (opened again by the next transaction)."""
        _close_all(self._fds)

    def _descriptors(self) -> list[int]:
        if self._pid != os.getpid():        # new, or inherited across a fork: not ours
            self._fds.clear()
            self._pid = os.getpid()
        if not self._fds:
            fds = [os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)]
            try:
                fds += [os.open(s, os.O_RDWR | os.O_CLOEXEC) for s in self.slots]
            except OSError:
                _close_all(fds)
                raise
            self._fds.extend(fds)
        return self._fds

    @contextmanager
    def _locked(self) -> Iterator[list[int]]:
        if self._pid != os.getpid():      # a lock a thread of the parent held stays held
            self._mutex = threading.Lock()
        # the threads of one process share the descriptor, and a flock is the open file
        # description's: a second thread's LOCK_EX would not wait, so they take turns first
        with self._mutex:
            fds = self._descriptors()
            fcntl.flock(fds[0], fcntl.LOCK_EX)
            try:
                yield fds
            finally:
                fcntl.flock(fds[0], fcntl.LOCK_UN)

    @staticmethod
    def _record(fd: int) -> tuple[int, bytes, int] | None:
        """(seq, body, crc32) of a slot whose header is whole, else None (the checksum is
        checked by the caller, for the slot it takes)."""
        data = os.pread(fd, _READ_HINT, 0)
        head, sep, rest = data.partition(b"\n")
        fields = head.split()
        if not sep or len(fields) != 3 or not all(f.isdigit() for f in fields):
            return None
        seq, crc, length = (int(f) for f in fields)
        if len(rest) < length and len(data) == _READ_HINT:
            rest = os.pread(fd, length, len(head) + 1)
        return seq, rest[:length], crc

    def _read(self, fds: list[int]) -> dict[str, Any]:
        found = [r for r in map(self._record, fds[1:]) if r is not None]
        for seq, body, crc in sorted(found, key=lambda r: -r[0]):
            if zlib.crc32(body) == crc:
                self._seq = seq
                state: dict[str, Any] = json.loads(body)
                return state
        raise RuntimeError(f"the fake host's state at {self.path} is unreadable")

    def _write(self, state: dict[str, Any]) -> None:
        self._seq += 1
        body = json.dumps(state, separators=(",", ":")).encode()
        record = b"%d %d %d\n" % (self._seq, zlib.crc32(body), len(body)) + body
        os.pwrite(self._fds[1 + self._seq % 2], record, 0)

    def _batched(self) -> dict[str, Any] | None:
        """The state of a batch this thread has open, else None."""
        batch = self._batch
        return batch[1] if batch is not None and batch[0] == threading.get_ident() else None

    def read(self) -> dict[str, Any]:
        """A consistent copy of the state (inside :meth:`batch`, the batch's state)."""
        batched = self._batched()
        if batched is not None:
            return batched
        with self._locked() as fds:
            return self._read(fds)

    @contextmanager
    def change(self) -> Iterator[dict[str, Any]]:
        """The state, to change in place; written back when the block ends without raising
        (an exception leaves the state as it was). Inside :meth:`batch`, the batch's state,
        written when the batch ends."""
        batched = self._batched()
        if batched is not None:
            yield batched
            return
        with self._locked() as fds:
            state = self._read(fds)
            yield state
            self._write(state)

    @contextmanager
    def batch(self) -> Iterator[None]:
        """One transaction for every change and read of the block by this thread (kvreg's
        own steps that make several charges, never code under test: the lock is held
        throughout). An exception that leaves the block leaves the state as it was before
        the batch (one caught inside it does not undo what its change did before it
        raised)."""
        if self._batched() is not None:
            yield
            return
        with self.change() as state:
            self._batch = (threading.get_ident(), state)
            try:
                yield
            finally:
                self._batch = None
