"""``FakeMooncake``: a Mooncake deployment on a fake fabric, with one trace and one plan.

It owns (or shares) a :class:`~kvreg.fakes.verbs.Fabric`, so a store's ``register_buffer``
becomes MRs on the node's NICs (honouring ``MC_MAX_MR_SIZE`` and each device's
``max_mr_size``, §1.6), verbs faults (``verbs.reg_mr``) reach the store, and the trace
shows the store calls and the MRs they made side by side. Stores that name the same
``master_server_addr`` share one object space, so a put on one node can be read on
another. ``patch()`` makes ``from mooncake.store import MooncakeDistributedStore`` and
``from mooncake.engine import TransferEngine`` give this fake's classes (the engines of one
deployment reach each other's segments by name, docs/mooncake-verbs.md §8). Nothing is
global: every instance is independent.
"""

from __future__ import annotations

import os
import types
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..doors import enlist, make_stale
from ..faults import FaultRule
from ..protocol import leak_text
from ..verbs.fabric import Fabric, Node
from ..verbs.modules import door_modules, patch_modules
from .config import ReplicateConfig, bind_allocator, bind_to_numa_node
from .deployment import Cluster
from .engine import TransferEngine, TransferNotify, TransferOpcode, bind_engine
from .engine_state import EngineState
from .errors import ErrorCode, error_name, te_error_name
from .profiles import StoreProfile, get_store_profile
from .store import MooncakeDistributedStore, bind_store

if TYPE_CHECKING:
    import torch

__all__ = ["Cluster", "FakeMooncake", "LiveBuffer"]

# classes bound to one deployment (bind_store, bind_allocator): doors forward them
_BOUND = {"mooncake.store": ("MooncakeDistributedStore", "MooncakeHostMemAllocator"),
          "mooncake.engine": ("TransferEngine",)}
_FIRST_RPC_PORT = 15000
_SUPPORT_FLAGS = ("SUPPORT_CUDA", "SUPPORT_EFA", "SUPPORT_HIP", "SUPPORT_INTRA_NVLINK",
                  "SUPPORT_MNNVL", "SUPPORT_MUSA")


@dataclass(frozen=True)
class LiveBuffer:
    """A ``register_buffer`` never unregistered, for leak reports."""

    node: str
    base: int
    size: int
    buffer: str | None
    offset: int | None

    def describe(self) -> str:
        where = f" ({self.buffer} + {self.offset:#x})" if self.buffer is not None else ""
        return f"{self.node}: [{self.base:#x}, {self.base + self.size:#x}) {self.size} bytes{where}"


def _name(api: str, code: int) -> str:
    return error_name(code) if code <= 0 else "bytes"


def _engine_name(api: str, code: int) -> str:
    return "OK" if code == 0 else te_error_name(code)


class FakeMooncake:
    """A fake Mooncake Store deployment (``profile``: ``"released"`` or ``"head"``)."""

    def __init__(self, profile: str | StoreProfile | None = None, *,
                 fabric: Fabric | None = None, node: str = "node0",
                 devices: Mapping[str, str] | None = None,
                 env: Mapping[str, str] | None = None) -> None:
        self.profile = get_store_profile(profile)
        self.fabric = fabric if fabric is not None else Fabric(())
        if node not in self.fabric.nodes:
            self.fabric.add_node(node)
        self.node_name = node
        host = self.fabric.node(node)
        if devices is not None:
            for name, nic_profile in devices.items():
                self.fabric.add_device(name, nic_profile, node=node)
        elif not host.nics:
            self.fabric.add_device("mlx5_0", "mlx5", node=node)
        self.trace = self.fabric.trace
        self.trace.namers["mooncake"] = _name
        self.trace.namers["mooncake.engine"] = _engine_name
        self.faults = self.fabric.faults
        self._env = env
        self.clusters: dict[str, Cluster] = {}
        self.stores: list[MooncakeDistributedStore] = []
        self._classes: dict[str, type[MooncakeDistributedStore]] = {}
        # the transfer engines (docs/mooncake-verbs.md §8): every one built, and the live
        # segments by name (the P2P handshake's namespace)
        self.engines: list[object] = []
        self.engine_segments: dict[str, EngineState] = {}
        self._engine_classes: dict[str, type[TransferEngine]] = {}
        self._ports = iter(range(_FIRST_RPC_PORT, 1 << 16))

    # -- building blocks ------------------------------------------------------------------
    def env(self) -> Mapping[str, str]:
        """The environment ``setup`` reads (MC_MAX_MR_SIZE, MC_SLICE_SIZE): os.environ unless
        one was given."""
        return self._env if self._env is not None else os.environ

    def cluster(self, master: str) -> Cluster:
        return self.clusters.setdefault(master, Cluster(master))

    def node(self, name: str | None = None) -> Node:
        return self.fabric.node(name or self.node_name)

    def store_class(self, node: str | None = None) -> type[MooncakeDistributedStore]:
        """``MooncakeDistributedStore`` as code on ``node`` imports it."""
        name = node or self.node_name
        self.fabric.node(name)
        if name not in self._classes:
            self._classes[name] = bind_store(self, name)
        return self._classes[name]

    def store(self, node: str | None = None) -> MooncakeDistributedStore:
        """A new (not yet set up) store object on ``node``."""
        return self.store_class(node)()

    def engine_class(self, node: str | None = None) -> type[TransferEngine]:
        """``mooncake.engine.TransferEngine`` as code on ``node`` imports it."""
        name = node or self.node_name
        self.fabric.node(name)
        if name not in self._engine_classes:
            self._engine_classes[name] = bind_engine(self, name)
        return self._engine_classes[name]

    def engine(self, node: str | None = None) -> TransferEngine:
        """A new (not yet initialized) transfer engine on ``node``."""
        return self.engine_class(node)()

    def rpc_port(self) -> int:
        """The RPC port the next initialized engine listens on (one per engine)."""
        return next(self._ports)

    def track(self, obj: Any, *, name: str = "", node: str | None = None) -> Any:
        """Name a real buffer in traces and leak reports (optional: registered process
        memory moves whether tracked or not)."""
        return self.node(node).track(obj, name=name)

    def virtual(self, shape: Sequence[int] | int, dtype: Any = "uint8", *, name: str = "",
                node: str | None = None) -> torch.Tensor:
        """A CPU ``torch.Tensor`` over reserved memory (no RAM until touched): registration
        and size checks; the fake never moves its bytes."""
        return self.node(node).virtual(shape, dtype, name=name)

    # -- faults ---------------------------------------------------------------------------
    def inject(self, api: str, *, nth: int | None = None, error: int | str | Any = None,
               **kwargs: Any) -> FaultRule:
        """Arm a fault: ``fake.inject("put", nth=2, error="TRANSFER_FAIL")``."""
        point = api if "." in api or api == "*" else f"mooncake.{api}"
        if error is None and "raise_" not in kwargs and "delay" not in kwargs:
            error = int(ErrorCode.INVALID_PARAMS)
        return self.faults.arm(point, error=error, nth=nth, **kwargs)

    # -- reports --------------------------------------------------------------------------
    def live_buffers(self) -> list[LiveBuffer]:
        """Every ``register_buffer`` of an open store that was never unregistered."""
        out = []
        for store in self.stores:
            client = store.client
            if client is None:
                continue
            node = client.te.node
            for base, size in sorted(client.buffers.items()):
                hit = node.resolve(base)
                out.append(LiveBuffer(node.name, base, size, hit[0] if hit else None,
                                      hit[1] if hit else None))
        return out

    def live_engine_buffers(self) -> list[LiveBuffer]:
        """Every region of an initialized transfer engine (its map, §8.2)."""
        out = []
        for engine in self.engines:
            st = getattr(engine, "state", None)
            if st is None:
                continue
            for base, size in sorted(st.core.regions.items()):
                hit = st.node.resolve(base)
                out.append(LiveBuffer(st.node.name, base, size, hit[0] if hit else None,
                                      hit[1] if hit else None))
        return out

    def live(self) -> list[LiveBuffer]:
        """What is still registered (fakes/protocol.py): every open store's buffers and
        every initialized engine's regions."""
        return self.live_buffers() + self.live_engine_buffers()

    def leak_report(self) -> str:
        """Empty when every registered buffer was unregistered (or its store closed)."""
        return leak_text(self.live(),
                         "Mooncake buffer(s) still registered (never unregistered)")

    def close_all(self) -> None:
        """Close every store (tearDownAll) and destroy every engine, as process exit would."""
        for store in self.stores:
            store.close()
        for engine in self.engines:
            if isinstance(engine, TransferEngine):
                engine.kvreg_destroy()

    # -- activation -----------------------------------------------------------------------
    def modules(self, node: str | None = None) -> dict[str, types.ModuleType]:
        """``mooncake``, ``mooncake.store`` and ``mooncake.engine`` as code on ``node`` sees
        them."""
        host = self.node(node)
        store_mod = types.ModuleType("mooncake.store", "kvreg fake of mooncake.store")
        store_mod.MooncakeDistributedStore = self.store_class(host.name)  # type: ignore[attr-defined]
        store_mod.ReplicateConfig = ReplicateConfig  # type: ignore[attr-defined]
        store_mod.MooncakeHostMemAllocator = bind_allocator(host)  # type: ignore[attr-defined]
        store_mod.bind_to_numa_node = bind_to_numa_node  # type: ignore[attr-defined]
        pkg = types.ModuleType("mooncake", "kvreg fake of the mooncake package")
        pkg.__path__ = []
        pkg.store = store_mod  # type: ignore[attr-defined]
        engine_mod = types.ModuleType("mooncake.engine", "kvreg fake of mooncake.engine")
        engine_mod.TransferEngine = self.engine_class(host.name)  # type: ignore[attr-defined]
        engine_mod.TransferOpcode = TransferOpcode  # type: ignore[attr-defined]
        engine_mod.TransferNotify = TransferNotify  # type: ignore[attr-defined]
        engine_mod.Read = TransferOpcode.Read  # type: ignore[attr-defined]
        engine_mod.Write = TransferOpcode.Write  # type: ignore[attr-defined]
        for flag in _SUPPORT_FLAGS:      # the non-CUDA wheel's build flags (§8.7)
            setattr(engine_mod, flag, False)
        pkg.engine = engine_mod  # type: ignore[attr-defined]
        return {"mooncake": pkg, "mooncake.store": store_mod, "mooncake.engine": engine_mod}

    @contextmanager
    def patch(self, node: str | None = None) -> Iterator[FakeMooncake]:
        """For the block, ``from mooncake.store import MooncakeDistributedStore`` and ``from
        mooncake.engine import TransferEngine`` reach the fake: the process's door modules and
        classes (fakes/doors.py), so a class kept from an earlier patch builds this fake's
        stores and engines."""
        enlist(self.retire)   # the open retire scope, if any, retires it at its end
        with ExitStack() as stack:
            doors = door_modules(self.modules(node), _BOUND, stack)
            stack.enter_context(patch_modules(doors, "mooncake"))
            yield self

    def retire(self) -> None:
        """This deployment is done with (its scope ended): its stores are reported when used
        again (a store is set up against one deployment and cannot be forwarded to another)."""
        for store in self.stores:
            make_stale(store, "a retired Mooncake deployment")
        for engine in self.engines:
            make_stale(engine, "a retired Mooncake deployment")
