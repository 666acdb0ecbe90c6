"""``FakeNixl``: NIXL agents in one process, with one trace, one fault plan and one memory.

It owns (or shares) a fake fabric for the trace, the fault plan and the address space DRAM
transfers move real bytes in, and optionally the fake CUDA device memory VRAM registrations
are checked against (``gpu=fake_cuda.gpu_memory()``). ``patch()`` makes ``from nixl._api
import nixl_agent, nixl_agent_config`` (and ``import nixl``, ``nixl._bindings``) give this
fake's classes, as the ``nixl`` meta package lays them out in 1.5.1. Agents of one fake load
each other's metadata; nothing is global.
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

from ..cuda.device_memory import GpuMemory
from ..doors import enlist
from ..faults import FaultRule
from ..protocol import leak_text
from ..verbs import memory
from ..verbs.fabric import Fabric, Node
from ..verbs.modules import door_modules, patch_modules
from . import api, bindings
from .agent import Xfer, nixlAgent, populate
from .errors import NIXL_POINTS, point_name
from .profiles import NixlProfile, get_nixl_profile

__all__ = ["FakeNixl", "LiveRegistration"]

_BOUND = {"nixl._api": ("nixl_agent",)}


@dataclass(frozen=True)
class LiveRegistration:
    """A descriptor an agent registered and never deregistered, for leak reports."""

    agent: str
    mem: str
    addr: int
    length: int
    dev: int
    buffer: str | None = None
    offset: int | None = None

    def describe(self) -> str:
        where = f" ({self.buffer} + {self.offset:#x})" if self.buffer is not None else ""
        return (f"{self.agent}: {self.mem} [{self.addr:#x}, {self.addr + self.length:#x}) "
                f"{self.length} bytes, devID {self.dev}{where}")


class FakeNixl:
    """Fake NIXL agents (``profile``: ``"ucx-cuda"``, the default, or ``"ucx-host"``).
    ``peers``: another FakeNixl on the same fabric (another node, its own GPU): the agents
    of both find each other as one fake's do, and a transfer between them moves DRAM bytes
    from one node's memory into the other's."""

    def __init__(self, profile: str | NixlProfile | None = None, *,
                 fabric: Fabric | None = None, node: str = "node0",
                 gpu: GpuMemory | None = None, peers: FakeNixl | None = None) -> None:
        self.profile = get_nixl_profile(profile)
        self.fabric = fabric if fabric is not None else Fabric(())
        if node not in self.fabric.nodes:
            self.fabric.add_node(node)
        self.node_name = node
        self.gpu = gpu
        self.trace = self.fabric.trace
        self.trace.namers["nixl"] = point_name
        self.faults = self.fabric.faults
        if peers is not None and peers.fabric is not self.fabric:
            raise ValueError("peers must share this fake's fabric")
        self.agents: dict[str, nixlAgent] = peers.agents if peers is not None else {}
        self.agent_objects: list[api.nixl_agent] = []
        self._agent_class: type[api.nixl_agent] | None = None

    @property
    def node(self) -> Node:
        return self.fabric.node(self.node_name)

    # -- building blocks ----------------------------------------------------------------------
    def agent_class(self) -> type[api.nixl_agent]:
        """``nixl._api.nixl_agent`` as code importing it under this fake gets it."""
        if self._agent_class is None:
            self._agent_class = type("nixl_agent", (api.nixl_agent,),
                                     {"_fake": self, "__module__": "nixl._api",
                                      "__doc__": api.nixl_agent.__doc__})
        return self._agent_class

    def agent(self, name: str, config: api.nixl_agent_config | None = None) -> api.nixl_agent:
        return self.agent_class()(name, config)

    def track(self, obj: Any, *, name: str = "") -> Any:
        """Name a real buffer in traces and leak reports."""
        return self.node.track(obj, name=name)

    # -- faults -------------------------------------------------------------------------------
    def inject(self, api_name: str, *, nth: int | None = None, error: int | str | Any = None,
               **kwargs: Any) -> FaultRule:
        """Arm a fault: ``fake.inject("register_memory", error="NIXL_ERR_BACKEND")``."""
        point = api_name if "." in api_name or api_name == "*" else f"nixl.{api_name}"
        if error is None and "raise_" not in kwargs and "delay" not in kwargs:
            # the backend's failure where the call can report one, else its first status
            codes = NIXL_POINTS.get(point) or frozenset({-3})
            error = -3 if -3 in codes else max(codes)
        return self.faults.arm(point, error=error, nth=nth, **kwargs)

    def check_fault(self, point: str, face: str, api_name: str,
                    args: tuple[Any, ...]) -> int | None:
        return self.fabric.check_fault(point, face, api_name, args, self.node)

    # -- transfers ----------------------------------------------------------------------------
    def run_transfer(self, agent: nixlAgent, xfer: Xfer) -> str:
        """Move the bytes of a posted request; "DONE" or "ERR" (remote memory deregistered
        since its metadata was loaded, under ``stale_remote="error"``; a VRAM range reached
        only through a registration whose device memory was released, docs/gpu-rdma.md §7)."""
        peer = self.agents.get(xfer.agent) if xfer.agent != agent.name else agent
        if peer is not None and self.profile.stale_remote == "error":
            live = peer.ranges(xfer.mems[1])
            if not populate(live, xfer.remote):
                return "ERR"
        if agent.invalidated(xfer.local) or (peer is not None
                                              and peer.invalidated(xfer.remote)):
            return "ERR"          # the invalidated MR's work request fails (§7 of gpu-rdma.md)
        if bindings.nixl_mem_t.VRAM_SEG not in xfer.mems:   # device bytes are not kept
            here = self.node.space
            there = peer.fake.node.space if peer is not None else here
            for (la, n, _), (ra, _, _) in zip(xfer.local, xfer.remote, strict=True):
                if xfer.op == "WRITE":
                    memory.copy(there, ra, here, la, n)
                else:
                    memory.copy(here, la, there, ra, n)
        if xfer.notif and peer is not None and peer is not agent:
            peer.notifs.setdefault(agent.name, []).append(xfer.notif)
        return "DONE"

    # -- reports ------------------------------------------------------------------------------
    def live(self) -> list[LiveRegistration]:
        """Every descriptor still registered (fakes/protocol.py)."""
        out = []
        for name, agent in self.agents.items():
            for mem, regs in agent.regs.items():
                for addr, length, dev, _meta in regs:
                    hit = self.node.resolve(addr) if mem == 0 else None
                    out.append(LiveRegistration(name, bindings.nixl_mem_t(mem).name, addr,
                                                length, dev, hit[0] if hit else None,
                                                hit[1] if hit else None))
        return out

    def leak_report(self) -> str:
        return leak_text(self.live(), "NIXL descriptor(s) still registered (never "
                         "deregistered)")

    # -- activation ---------------------------------------------------------------------------
    def modules(self) -> dict[str, types.ModuleType]:
        """``nixl``, ``nixl._api`` and ``nixl._bindings`` as the meta package lays them out."""
        bind = types.ModuleType("nixl._bindings", "kvreg fake of nixl._bindings")
        for name in bindings.__all__:
            setattr(bind, name, getattr(bindings, name))
        bind.nixlAgent = nixlAgent  # type: ignore[attr-defined]
        api_mod = types.ModuleType("nixl._api", "kvreg fake of nixl._api")
        for name in api.__all__:
            setattr(api_mod, name, getattr(api, name))
        api_mod.nixl_agent = self.agent_class()  # type: ignore[attr-defined]
        api_mod.nixlBind = bind  # type: ignore[attr-defined]
        pkg = types.ModuleType("nixl", "kvreg fake of the nixl package")
        pkg.__path__ = []
        pkg._api = api_mod  # type: ignore[attr-defined]
        pkg._bindings = bind  # type: ignore[attr-defined]
        for name in api.__all__:
            setattr(pkg, name, getattr(api_mod, name))
        return {"nixl": pkg, "nixl._api": api_mod, "nixl._bindings": bind}

    @contextmanager
    def patch(self) -> Iterator[FakeNixl]:
        """For the block, ``from nixl._api import nixl_agent`` reaches this fake (through the
        process's door modules, so a class kept from an earlier patch builds this fake's
        agents)."""
        enlist(self.retire)
        with ExitStack() as stack:
            doors = door_modules(self.modules(), _BOUND, stack)
            stack.enter_context(patch_modules(doors, "nixl"))
            yield self

    def retire(self) -> None:
        """Nothing to mark: an agent is bound to its fake and keeps working on it."""
