"""One initialized engine's state and the data path between engines (docs/mooncake-verbs.md §8).

``EngineState`` is what ``initialize()`` builds: the segment it publishes (named
``host:rpc_port`` in P2P mode, else the hostname), the transport auto-discovery picks (RDMA
over the node's NICs unless ``MC_FORCE_TCP`` is set or there are none, else tcp: the
binding's ``protocol`` argument chooses only the memory allocator, §8.1), the region map
(:class:`~.engine_core.EngineCore`) and the segments it opened, cached as first seen.
``move`` is one transfer entry: the peer's server checks the remote range lies inside one of
its published buffers (§8.4); rdma also needs the local range inside one of ours.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from ..verbs import memory
from ..verbs.enums import ibv_access_flags as F
from ..verbs.fabric import Fabric
from ..verbs.node import Node
from .engine_core import EngineCore, RdmaTransport, Segment, TcpTransport, Transport
from .profiles import StoreProfile

__all__ = ["P2P", "EngineDeployment", "EngineState"]

P2P = "P2PHANDSHAKE"
_ACCESS = int(F.IBV_ACCESS_LOCAL_WRITE | F.IBV_ACCESS_REMOTE_WRITE | F.IBV_ACCESS_REMOTE_READ)


class EngineDeployment(Protocol):
    """What an engine needs of its deployment: the fabric, the profile, the segments."""

    profile: StoreProfile
    fabric: Fabric
    engine_segments: dict[str, EngineState]
    engines: list[object]

    def env(self) -> Mapping[str, str]: ...

    def rpc_port(self) -> int: ...


@dataclass(eq=False)
class EngineState:
    """An initialized engine (``TransferEnginePy::engine_``)."""

    node: Node
    segment: Segment
    rpc_port: int
    core: EngineCore
    protocol: str
    opened: dict[str, Segment] = field(default_factory=dict)

    @classmethod
    def build(cls, deployment: EngineDeployment, node: Node, hostname: str,
              metadata_server: str, device_name: str) -> EngineState:
        host = hostname.partition(":")[0]
        port = deployment.rpc_port()
        name = f"{host}:{port}" if metadata_server == P2P else hostname
        segment = Segment(name)
        wanted = [d.strip() for d in device_name.split(",") if d.strip()]
        nics = [n for k, n in node.nics.items() if not wanted or k in wanted]
        transport: Transport
        if nics and not deployment.env().get("MC_FORCE_TCP"):
            prof = deployment.profile
            transport = RdmaTransport(segment, nics, _ACCESS,
                                      gpu_registration=prof.engine_gpu_registration,
                                      dmabuf_export=prof.engine_dmabuf_export)
        else:
            transport = TcpTransport(segment)
        core = EngineCore(deployment.profile, [transport])
        return cls(node, segment, port, core, transport.name)

    def open(self, deployment: EngineDeployment, name: str) -> EngineState | None:
        """``openSegment``: the peer now serving ``name`` (None: -1); the first sight of its
        descriptor is cached, as ``get_first_buffer_address`` shows (§8.5)."""
        peer = deployment.engine_segments.get(name)
        if peer is None:
            return None
        if name not in self.opened and peer is not self:
            self.opened[name] = peer.segment.snapshot()
        return peer

    def first_buffer(self, deployment: EngineDeployment, name: str) -> int:
        if name == self.segment.name:
            return self.segment.first_address()
        if name not in self.opened and self.open(deployment, name) is None:
            return 0
        return self.opened[name].first_address()

    def move(self, peer: EngineState, local: int, remote: int, nbytes: int, *,
             write: bool) -> bool:
        """One entry: False where the real transfer fails (the whole call is then -1)."""
        if nbytes == 0:
            return True
        rdma = self.protocol == "rdma"
        if not (peer.segment.usable if rdma else peer.segment.holds)(remote, nbytes):
            return False
        if rdma and not self.segment.usable(local, nbytes):
            return False
        if write:
            memory.copy(peer.node.space, remote, self.node.space, local, nbytes)
        else:
            memory.copy(self.node.space, local, peer.node.space, remote, nbytes)
        return True
