"""Real ``MooncakeDistributedStore`` clients of one real master, set up over tcp on its address.

:class:`RealMooncake` is the real counterpart of :class:`~kvreg.fakes.mooncake.FakeMooncake`
for what the tier compares: it hands out stores already ``setup()`` against its
:class:`~.mooncake_master.MasterProcess` (the seven-argument call of docs/mooncake-verbs.md
§7, each client on its own free port), and closes every store it handed out at the end.
The binding is in-process: a call that segfaults it kills the caller, so the callers never
issue the calls §7.1 lists on a store without a client (``tests/mooncake_real`` proves those
crashes in child processes).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .mooncake_master import MasterProcess, free_port

__all__ = ["MiB", "RealMooncake", "SetupFailed", "setup_args"]

MiB = 1 << 20


class SetupFailed(RuntimeError):
    """``setup()`` on the real store returned non-zero; the message names the master log."""


def setup_args(master: MasterProcess, global_segment: int, local_buffer: int,
               hostname: str | None = None) -> tuple[Any, ...]:
    """The positional ``setup`` arguments of a tcp client of ``master`` (its segment named by
    the master's address and a free port)."""
    host = hostname or f"{master.host}:{free_port(master.host)}"
    return (host, master.metadata_url, int(global_segment), int(local_buffer), "tcp", "",
            master.address)


class RealMooncake:
    """Stores of one running master; ``close_all()`` closes each (also from ``__exit__``)."""

    def __init__(self, master: MasterProcess,
                 store_class: Callable[[], Any] | None = None) -> None:
        self.master = master
        self._store_class = store_class
        self.stores: list[Any] = []

    @property
    def store_class(self) -> Callable[[], Any]:
        if self._store_class is None:
            from mooncake.store import MooncakeDistributedStore

            self._store_class = MooncakeDistributedStore
        return self._store_class

    def new(self) -> Any:
        """A store object that is not set up (only the §7.1 checking calls are safe on it)."""
        store = self.store_class()
        self.stores.append(store)
        return store

    def store(self, global_segment: int = 64 * MiB, local_buffer: int = 16 * MiB) -> Any:
        """A store set up against the master; SetupFailed names the log when it is not."""
        self.master.check_alive()
        store = self.new()
        rc = store.setup(*setup_args(self.master, global_segment, local_buffer))
        if rc != 0:
            raise SetupFailed(f"MooncakeDistributedStore.setup(...) returned {rc}; master log: "
                              f"{self.master.log_path}")
        return store

    def close_all(self) -> None:
        """Close every store handed out (close() on a closed store returns 0, §7.1)."""
        for store in self.stores:
            store.close()
        self.stores.clear()

    def __enter__(self) -> RealMooncake:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close_all()
