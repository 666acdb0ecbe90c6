"""Where the rank processes of one fake host meet: a file per meeting beside the host's state.

An arrival is a line appended to the meeting's file (``O_APPEND`` writes are atomic): the
rank's number, or ``-`` for a caller that gives none. Waiting reads those few bytes, no
transaction of the host's state, so the waiting ranks never hold up the others; which ranks
the host's OOM killer took is read from the state only every ``KILLED_POLL_S``. A rank the
host killed counts as arrived: it never comes. Every wait is bounded: a peer that never
comes (one whose build failed) delays the others, never holds them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Collection, Iterable

__all__ = ["KILLED_POLL_S", "Meeting"]

# how often a waiting rank reads which ranks the host killed (one read of the state)
KILLED_POLL_S = 0.02
_SPIN_S = 0.001


class Meeting:
    """The meeting ``name`` of the host whose state is at ``state_path``; ``killed()``
    answers the ranks the host's OOM killer took."""

    def __init__(self, state_path: str | os.PathLike[str], name: str,
                 killed: Callable[[], Iterable[int]]) -> None:
        if not name.isidentifier():
            raise ValueError(f"a rendezvous name is a plain word; got {name!r}")
        self.path = f"{os.fspath(state_path)}.meet-{name}"
        self._killed = killed

    def arrive(self, rank: int | None = None) -> None:
        """Note the caller's arrival (by its rank where it gives one)."""
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, b"-\n" if rank is None else b"%d\n" % rank)
        finally:
            os.close(fd)

    def arrivals(self) -> list[bytes]:
        """One entry per arrival so far: the rank's number, or ``-``."""
        fd = self._open()
        try:
            return _read(fd)
        finally:
            os.close(fd)

    def wait(self, timeout: float, *, parties: int = 0, ranks: Iterable[int] = ()) -> bool:
        """Wait until ``parties`` have arrived and each of ``ranks`` has (True), or until
        ``timeout`` seconds passed (False). A rank the host killed counts as arrived: among
        ``ranks``, and among the ranks below ``parties`` that have not arrived by number."""
        wanted = frozenset(ranks)
        deadline = time.monotonic() + timeout
        next_killed = time.monotonic() + KILLED_POLL_S
        fd = self._open()
        try:
            while True:
                arrived = _read(fd)
                if self._met(arrived, parties, wanted, ()):
                    return True
                now = time.monotonic()
                if now >= next_killed or now >= deadline:
                    next_killed = now + KILLED_POLL_S
                    if self._met(arrived, parties, wanted, frozenset(self._killed())):
                        return True
                if now >= deadline:
                    return False
                time.sleep(_SPIN_S)
        finally:
            os.close(fd)

    def _open(self) -> int:
        return os.open(self.path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)

    @staticmethod
    def _met(arrived: list[bytes], parties: int, wanted: frozenset[int],
             killed: Collection[int]) -> bool:
        named = {int(a) for a in arrived if a.isdigit()}
        if not wanted <= named | set(killed):
            return False
        gone = [r for r in killed if r < parties and r not in named]
        return len(arrived) + len(gone) >= parties


def _read(fd: int) -> list[bytes]:
    return os.pread(fd, 1 << 16, 0).split()
