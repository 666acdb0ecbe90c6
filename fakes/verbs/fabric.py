"""The fake RDMA fabric: nodes (processes) with NICs, one trace and one fault plan.

A :class:`Fabric` holds several :class:`~.node.Node` objects in one Python process; each
node has its own address space, ``RLIMIT_MEMLOCK`` and NICs, and sees the pyverbs API
through ``node.pyverbs`` (or ``fabric.patch(node)``). Every fabric owns one trace and one
fault plan, shared by its nodes; nothing is global, so fabrics are independent and tests
can run in parallel. ``ibv_reg_mr``'s rules (docs/mooncake-verbs.md §5.2) live in
:meth:`~.node.Nic.reg_mr`.
"""

from __future__ import annotations

import errno
import itertools
import time
import types
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from ..address_space import AddressSpace
from ..faults import FaultPlan, FaultRule
from ..protocol import leak_text
from ..recorder import Trace
from . import enums as V
from .errors import errno_name
from .modules import build_modules, patch_pyverbs
from .node import PAGE_SIZE, U64, LiveMR, MrRecord, Nic, Node, Port
from .profiles import NicProfile, get_nic_profile

__all__ = ["PAGE_SIZE", "Fabric", "FabricTrace", "LiveMR", "MrRecord", "Nic", "Node", "Port"]

class FabricTrace(Trace):
    """The shared call trace; codes are named in their family (errno, wc status, ErrorCode)."""

    def __init__(self) -> None:
        super().__init__()
        self.namers: dict[str, Callable[[str, int], str]] = {"verbs": _verbs_name}

    def format(self, limit: int | None = None) -> str:
        lines = []
        for e in list(self)[:limit]:
            shown = ", ".join(self._show(a) for a in e.args)
            family = e.face.split(":", 1)[0]
            namer = self.namers.get(family)
            res = "" if e.code is None or namer is None else f" -> {e.code} {namer(e.api, e.code)}"
            inj = " [injected]" if e.injected else ""
            lines.append(f"#{e.seq + 1} {e.face}.{e.api}({shown}){res}{inj}")
        return "\n".join(lines)


def _verbs_name(api: str, code: int) -> str:
    if api.startswith("wr."):
        return V.ibv_wc_status(code).name if 0 <= code <= 23 else str(code)
    return "OK" if code == 0 else errno_name(code)


class Fabric:
    """Several nodes and NICs in one process, with one trace and one fault plan."""

    def __init__(self, nodes: Sequence[str] = ("node0",), *,
                 devices: Mapping[str, str] | None = None) -> None:
        self.trace = FabricTrace()
        self.faults = FaultPlan()
        self.nodes: dict[str, Node] = {}
        self._lids = itertools.count(1)
        self._guids = itertools.count(0x0002C90300A0B001)
        self._qpns = itertools.count(0x11)
        for name in nodes:
            self.add_node(name)
        for dev, profile in (devices or {}).items():
            self.add_device(dev, profile)

    # -- topology -----------------------------------------------------------------------
    def add_node(self, name: str, *, space: AddressSpace | None = None,
                 memlock_limit: int | None = None) -> Node:
        """A new process on the fabric; ``memlock_limit`` is RLIMIT_MEMLOCK in bytes."""
        if name in self.nodes:
            raise ValueError(f"node {name!r} already exists")
        node = Node(self, name, space, memlock_limit)
        self.nodes[name] = node
        return node

    def node(self, name: str | None = None) -> Node:
        if name is None:
            if not self.nodes:
                raise ValueError("the fabric has no node; call add_node() first")
            return next(iter(self.nodes.values()))
        try:
            return self.nodes[name]
        except KeyError:
            raise ValueError(f"unknown node {name!r}; nodes: {', '.join(self.nodes)}") from None

    def add_device(self, name: str, profile: str | NicProfile | None = None, *,
                   node: str | None = None, ports: int = 1, **attrs: Any) -> Nic:
        """Add a NIC to a node, or override DeviceAttr fields of an existing one."""
        host = self.node(node)
        if name in host.nics:
            nic = host.nics[name]
            if profile is not None and get_nic_profile(profile) != nic.profile:
                raise ValueError(f"device {name!r} already exists with profile "
                                 f"{nic.profile.name!r}")
            nic.set_attr(**attrs)
            return nic
        prof = get_nic_profile(profile)
        guid = next(self._guids)
        port_list = []
        for num in range(1, ports + 1):
            lid = next(self._lids)
            gid = _gid(guid, num)
            port_list.append(Port(num, lid, gid, prof.link_layer))
        attrs.setdefault("phys_port_cnt", ports)
        nic = Nic(host, name, prof, len(host.nics), guid, port_list, attrs)
        host.nics[name] = nic
        return nic

    def devices(self) -> list[Nic]:
        return [nic for node in self.nodes.values() for nic in node.nics.values()]

    def find_port(self, *, lid: int = 0, gid: str | None = None) -> tuple[Nic, Port] | None:
        """The NIC port an address handle names (by GID when global, else by LID)."""
        for nic in self.devices():
            for port in nic.ports:
                if (gid is not None and port.gid == gid) or (gid is None and lid and
                                                             port.lid == lid):
                    return nic, port
        return None

    def new_qpn(self) -> int:
        return next(self._qpns)

    def build_modules(self, node: Node) -> dict[str, types.ModuleType]:
        """The pyverbs module tree as ``node`` sees it (cached by the node)."""
        return build_modules(node)

    # -- faults -------------------------------------------------------------------------
    def check_fault(self, point: str, face: str, api: str, args: tuple[Any, ...],
                    node: Node) -> int | None:
        """The injected code for this call, if a rule fires (raise/delay happen here)."""
        if not self.faults:
            return None
        rule: FaultRule | None = self.faults.check_call(point, args, {}, node.resolve)
        if rule is None:
            return None
        if rule.delay:
            time.sleep(rule.delay)
        if rule.raise_ is not None:
            self.trace.append(face, api, args, None, rule.raise_, True)
            raise rule.raise_
        return rule.error

    def inject(self, api: str, *, nth: int | None = None, error: int | str | Any = None,
               **kwargs: Any) -> FaultRule:
        """Arm a fault: ``fabric.inject("reg_mr", nth=2, error="ENOMEM")``."""
        point = api if "." in api or api == "*" else f"verbs.{api}"
        if error is None and "raise_" not in kwargs and "delay" not in kwargs:
            error = errno.EINVAL if point != "verbs.completion" else \
                int(V.ibv_wc_status.IBV_WC_GENERAL_ERR)
        return self.faults.arm(point, error=error, nth=nth, **kwargs)

    # -- reports ------------------------------------------------------------------------
    def live_mrs(self) -> list[LiveMR]:
        out = []
        for nic in self.devices():
            for rec in nic.live_mrs():
                hit = nic.node.resolve(rec.addr)
                out.append(LiveMR(nic.node.name, nic.name, rec.addr, rec.length, rec.access,
                                  rec.lkey, rec.owner, hit[0] if hit else None,
                                  hit[1] if hit else None))
        return out

    def live(self) -> list[LiveMR]:
        """What is still registered (fakes/protocol.py): every NIC's live MRs."""
        return self.live_mrs()

    def leak_report(self) -> str:
        """Empty when no MR is left; otherwise one line per MR still registered."""
        return leak_text(self.live(), "MR(s) still registered (never deregistered)")

    # -- activation ---------------------------------------------------------------------
    @contextmanager
    def patch(self, node: str | None = None) -> Iterator[Node]:
        """For the block, ``import pyverbs...`` reaches this fabric as ``node`` sees it."""
        host = self.node(node)
        with patch_pyverbs(host.modules):
            yield host


def _gid(guid: int, port: int) -> str:
    """A link-local GID from the port GUID: ``fe80:0000:0000:0000:xxxx:xxxx:xxxx:xxxx``."""
    iid = (guid + port - 1) & (U64 - 1)
    words = ["fe80", "0000", "0000", "0000"] + [f"{(iid >> s) & 0xFFFF:04x}"
                                                for s in (48, 32, 16, 0)]
    return ":".join(words)
