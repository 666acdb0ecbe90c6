"""Mooncake scenarios on the real store: every store call of the implementation, mirrored.

``run_scenario(sc, impl, backend=MooncakeMirror(real))`` runs a Mooncake scenario as usual
— the fake deployment still decides MRs, NIC limits, faults and the trace the verdict is
judged from — and the same call, with the same arguments, also goes to a real store (tcp,
set up by the mirror against the real master). The fake answers first and the real store
second, so the bytes a read leaves in the pool are the real store's: the round-trip
checks judge real data. Every pair of results is compared:

- equal: agreeing;
- the fake answered from an armed fault (``injected`` in its trace): not compared;
- a registration call on a fake store whose protocol is not tcp, or a data call that the
  fake failed for an MR rule (TRANSFER_FAIL): *fake-only* (MR limits, NICs and slices
  across MRs need RDMA, docs/mooncake-verbs.md §1.6-§1.7), counted, never an error;
- anything else: a disagreement, listed with the call.

Virtual pools (no RAM behind them) are fake-only: the real store would read unmapped
memory. The target skips those scenarios with that reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvreg.fakes.mooncake import ErrorCode, ReplicateConfig

from .mooncake_real import RealMooncake

__all__ = ["MirroredStore", "MooncakeMirror"]

_REGISTRATION = frozenset({"register_buffer", "unregister_buffer"})
_NOT_MIRRORED = frozenset({"registered_buffers", "client", "setup", "setup_dummy"})
TRANSFER_FAIL = int(ErrorCode.TRANSFER_FAIL)


@dataclass
class MooncakeMirror:
    """The ``backend`` for Mooncake scenarios on the real store; one per real master."""

    real: RealMooncake
    agreeing: int = 0
    fake_only: int = 0
    injected: int = 0
    disagreements: list[str] = field(default_factory=list)
    _stores: dict[str, Any] = field(default_factory=dict)
    # per node: bases the real store holds registered (a fake-only difference can leave
    # one the fake refused; the next scenario's pool may reuse the address)
    live: dict[str, set[int]] = field(default_factory=dict)
    config_class: Any = None

    def __post_init__(self) -> None:
        # taken now: while a scenario runs, ``mooncake.store`` in sys.modules is the fake's
        if self.config_class is None:
            from mooncake.store import ReplicateConfig as RealConfig

            self.config_class = RealConfig

    def wrap_store(self, node: str, fake_store: Any, fake: Any) -> MirroredStore:
        """``fake_store`` (set up) paired with this node's real store, emptied first."""
        real = self._stores.get(node)
        live = self.live.setdefault(node, set())
        if real is None or real.health_check() != 0:
            real = self._stores[node] = self.real.store()
            live.clear()
        for base in sorted(live):         # no registration of an earlier scenario
            real.unregister_buffer(base)
        live.clear()
        real.remove_all(True)             # no object or lease of an earlier scenario
        return MirroredStore(fake_store, real, fake, self, live)

    def real_store(self, node: str) -> Any:
        """The real store paired with ``node``'s stores (KeyError before ``wrap_store``)."""
        return self._stores[node]

    def record(self, api: str, args: tuple[Any, ...], fake_result: Any, real_result: Any,
               *, injected: bool, protocol: str | None) -> None:
        if injected:
            self.injected += 1
        elif _same(fake_result, real_result):
            self.agreeing += 1
        elif protocol != "tcp" and (api in _REGISTRATION or _has(fake_result, TRANSFER_FAIL)):
            self.fake_only += 1
        else:
            self.disagreements.append(f"{api}{_short(args)}: fake {fake_result!r}, real "
                                      f"{real_result!r}")

    def summary(self) -> str:
        return (f"{self.agreeing} agreeing, {self.fake_only} fake-only (RDMA), "
                f"{self.injected} injected, {len(self.disagreements)} disagreeing")


class MirroredStore:
    """A fake store whose every public call is also made on a real store."""

    def __init__(self, fake_store: Any, real_store: Any, fake: Any,
                 mirror: MooncakeMirror, live: set[int]) -> None:
        self._live = live
        self._fake_store = fake_store
        self._real_store = real_store
        self._fake = fake
        self._mirror = mirror

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._fake_store, name)
        if name.startswith("_") or name in _NOT_MIRRORED or not callable(target):
            return target

        def mirrored(*args: Any, **kwargs: Any) -> Any:
            before = len(self._fake.trace)
            result = target(*args, **kwargs)        # may raise (StoreCrash, budget): no real
            trace = self._fake.trace
            injected = any(trace[i].injected for i in range(before, len(trace)))
            client = self._fake_store.client
            protocol = client.protocol if client is not None else None
            real_result = getattr(self._real_store, name)(
                *[self._real_value(a) for a in args],
                **{k: self._real_value(v) for k, v in kwargs.items()})
            self._mirror.record(name, args, result, real_result, injected=injected,
                                protocol=protocol)
            if name == "register_buffer" and real_result == 0:
                self._live.add(int(args[0]))
            elif name == "unregister_buffer" and real_result == 0:
                self._live.discard(int(args[0]))
            elif name == "close":
                self._live.clear()
            return result

        return mirrored

    def _real_value(self, value: Any) -> Any:
        """The fake's ReplicateConfig as the binding's own (pybind accepts no other type)."""
        if not isinstance(value, ReplicateConfig):
            return value
        real = self._mirror.config_class()
        for name in ("replica_num", "preferred_segment", "prefer_alloc_in_same_node"):
            if hasattr(real, name):
                setattr(real, name, getattr(value, name))
        return real


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return [int(x) for x in a] == [int(x) for x in b]
    return bool(a == b)


def _has(result: Any, code: int) -> bool:
    if isinstance(result, list | tuple):
        return code in [int(x) for x in result]
    return isinstance(result, int) and result == code


def _short(args: tuple[Any, ...]) -> str:
    text = repr(args)
    return text if len(text) < 160 else text[:157] + "..."
