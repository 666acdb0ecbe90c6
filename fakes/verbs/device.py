"""``pyverbs.device``: Device, Context, DeviceAttr, PortAttr (docs/mooncake-verbs.md §4.3).

``Context`` and ``get_device_list`` must know which node of which fabric they run on, so
each node gets its own subclass (``bind_context``); everything else is shared. Closing a
Context closes what hangs off it (PDs, MRs, CQs, QPs), as pyverbs does through weakrefs.
"""

from __future__ import annotations

import errno
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from . import enums as V
from .addr import GID
from .errors import COVERAGE_HINT, NotModelledError, PyverbsRDMAError, PyverbsUserError
from .strings import gid_str

if TYPE_CHECKING:
    from .node import Nic, Node

__all__ = ["CONTEXT_NOT_MODELLED", "Context", "Device", "DeviceAttr", "DeviceAttrEx",
           "GIDEntry", "ODPCaps", "PortAttr", "TSOCaps", "bind_context",
           "device_list_function"]

# Context methods of rdma-core's pyverbs that the fake does not model: present (hasattr
# is True, as on the real class), raising NotModelledError when called
CONTEXT_NOT_MODELLED = frozenset({"query_port_speed", "get_async_event",
                                   "query_rt_values_ex", "cmd_fd", "context"})


class _ReadOnly:
    """Read-only attribute bag: pyverbs' attr objects expose C struct fields as properties."""

    _kind = "attr"

    def __init__(self, values: dict[str, Any]) -> None:
        object.__setattr__(self, "_values", dict(values))

    def __getattr__(self, name: str) -> Any:
        values: dict[str, Any] = object.__getattribute__(self, "_values")
        try:
            return values[name]
        except KeyError:
            raise AttributeError(f"'{type(self).__name__}' object has no attribute "
                                 f"{name!r}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"attribute {name!r} of '{type(self).__name__}' objects is not "
                             "writable")

    def __dir__(self) -> list[str]:
        return sorted(object.__getattribute__(self, "_values"))

    def __repr__(self) -> str:
        values: dict[str, Any] = object.__getattribute__(self, "_values")
        shown = ", ".join(f"{k}={v}" for k, v in values.items())
        return f"{type(self).__name__}({shown})"


class DeviceAttr(_ReadOnly):
    """``ibv_device_attr`` (§4.3): ``max_mr_size``, ``max_mr``, ``page_size_cap``, ..."""


class DeviceAttrEx(_ReadOnly):
    """``ibv_device_attr_ex``: ``orig_attr`` is the plain DeviceAttr; ``odp_caps`` says
    what on-demand paging the NIC profile advertises."""


class ODPCaps(_ReadOnly):
    """``ibv_odp_caps``: ``general_caps`` (IBV_ODP_SUPPORT, IBV_ODP_SUPPORT_IMPLICIT) and
    the per-transport ``ibv_odp_transport_cap_bits``."""


class TSOCaps(_ReadOnly):
    """``ibv_tso_caps``: ``max_tso`` and ``supported_qpts`` (no TSO in the fake: zeros)."""


class GIDEntry(_ReadOnly):
    """``ibv_gid_entry`` (``query_gid_ex``): the GID's two halves, index, port, type."""

    def gid_str(self) -> str:
        return gid_str(int(self.gid_subnet_prefix), int(self.gid_interface_id))


class PortAttr(_ReadOnly):
    """``ibv_port_attr`` (§4.3): ``state``, ``link_layer``, ``max_mtu``, ``lid``, ..."""


class Device:
    """One entry of ``get_device_list()``: ``name`` is **bytes** (§4.3)."""

    def __init__(self, name: bytes, node_type: int, transport_type: int, guid: int,
                 index: int) -> None:
        self._name = name
        self._node_type = node_type
        self._transport_type = transport_type
        self._guid = guid
        self._index = index

    @property
    def name(self) -> bytes:
        return self._name

    @property
    def node_type(self) -> int:
        return self._node_type

    @property
    def transport_type(self) -> int:
        return self._transport_type

    @property
    def guid(self) -> int:
        return self._guid

    @property
    def index(self) -> int:
        return self._index

    def __repr__(self) -> str:
        return f"Device({self._name!r}, guid={self._guid:#x})"


class Context:
    """An opened device (``ibv_open_device``); a context manager, as in pyverbs."""

    _node: ClassVar[Node | None] = None

    def __init__(self, **kwargs: Any) -> None:
        self._closed = True
        self._children: weakref.WeakSet[Any] = weakref.WeakSet()
        name = kwargs.get("name")
        if name is None:
            if kwargs.get("cmid") is not None or kwargs.get("cmd_fd") is not None:
                raise PyverbsUserError("kvreg's fake pyverbs models Context(name=...) only; "
                                       "cmid= and cmd_fd= are not modelled")
            raise PyverbsUserError("Device name must be provided")
        if isinstance(name, bytes):
            name = name.decode()
        node = type(self)._node
        if node is None:
            raise PyverbsUserError("this Context class belongs to no fake node; use "
                                   "node.pyverbs.device.Context or fabric.patch()")
        nic = node.nics.get(str(name))
        if nic is None:
            raise PyverbsRDMAError(f"Failed to find device {name}")
        self._nic: Nic = nic
        self._name = str(name)
        self._closed = False

    # -- identity -------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self._name

    @property
    def nic(self) -> Nic:
        """The fake device behind this context (not a pyverbs attribute)."""
        return self._nic

    @property
    def num_comp_vectors(self) -> int:
        return int(self._nic.profile.num_comp_vectors)

    # -- queries --------------------------------------------------------------------------
    def _check_open(self, what: str) -> None:
        if self._closed:
            raise PyverbsRDMAError(f"{what}: the context is closed", errno.EBADF)

    def query_device(self) -> DeviceAttr:
        """A snapshot of the device's attributes (§4.3)."""
        self._check_open(f"Failed to query device {self._name}")
        return DeviceAttr(self._nic.attr)

    def query_device_ex(self) -> DeviceAttrEx:
        """The extended attributes; ODP as the profile advertises it, the rest neutral."""
        self._check_open(f"Failed to query EX device {self._name}")
        prof = self._nic.profile
        odp = ODPCaps({"general_caps": prof.odp_general_caps, "rc_odp_caps": prof.odp_rc_caps,
                       "uc_odp_caps": 0, "ud_odp_caps": 0, "xrc_odp_caps": 0})
        return DeviceAttrEx({
            "orig_attr": DeviceAttr(self._nic.attr), "comp_mask": 0, "max_dm_size": 0,
            "odp_caps": odp, "tso_caps": TSOCaps({"max_tso": 0, "supported_qpts": 0}),
            "phys_port_cnt_ex": len(self._nic.ports), "completion_timestamp_mask": 0,
            "hca_core_clock": 0, "device_cap_flags_ex": int(self._nic.attr["device_cap_flags"]),
            "raw_packet_caps": 0, "max_wq_type_rq": 0, "pci_atomic_caps": None,
            "rss_caps": None, "tm_caps": None, "cq_mod_caps": None,
            "packet_pacing_caps": None})

    def _port(self, port_num: int, what: str) -> Any:
        self._check_open(what)
        if not 1 <= port_num <= len(self._nic.ports):
            raise PyverbsRDMAError(what, errno.EINVAL)
        return self._nic.ports[port_num - 1]

    def query_port(self, port_num: int = 1) -> PortAttr:
        """Port state, MTU, LID and link layer; every fake port is ACTIVE (§4.7)."""
        port = self._port(port_num, f"Failed to query port {port_num}")
        return PortAttr({
            "state": port.state, "max_mtu": port.max_mtu, "active_mtu": port.active_mtu,
            "gid_tbl_len": 1, "port_cap_flags": 0, "max_msg_sz": 1 << 31, "bad_pkey_cntr": 0,
            "qkey_viol_cntr": 0, "pkey_tbl_len": 1, "lid": port.lid, "sm_lid": 0, "lmc": 0,
            "max_vl_num": 1, "sm_sl": 0, "subnet_timeout": 0, "init_type_reply": 0,
            "active_width": 2, "active_speed": 32, "phys_state": 5,
            "link_layer": port.link_layer, "flags": 0, "port_cap_flags2": 0})

    def query_gid(self, port_num: int, index: int) -> GID:
        """The port's GID; the fake has one GID per port, at index 0."""
        port = self._port(port_num, "Failed to query gid")
        if index != 0:
            raise PyverbsRDMAError(f"Failed to query gid {index} of port {port_num}",
                                   errno.EINVAL)
        return GID(port.gid)

    def _gid_entry(self, port_num: int, index: int, what: str) -> GIDEntry:
        port = self._port(port_num, what)
        if index != 0:
            raise PyverbsRDMAError(what, errno.EINVAL)
        words = [int(w, 16) for w in port.gid.split(":")]
        hi = int.from_bytes(b"".join(w.to_bytes(2, "big") for w in words[:4]), "little")
        lo = int.from_bytes(b"".join(w.to_bytes(2, "big") for w in words[4:]), "little")
        gid_type = V.ENUMS["ibv_gid_type"]
        kind = gid_type.IBV_GID_TYPE_IB if port.link_layer == 1 else \
            gid_type.IBV_GID_TYPE_ROCE_V2
        return GIDEntry({"gid_subnet_prefix": hi, "gid_interface_id": lo, "gid_index": index,
                         "port_num": port_num, "gid_type": int(kind), "ndev_ifindex": 0})

    def query_gid_ex(self, port_num: int, gid_index: int, flags: int = 0) -> GIDEntry:
        """``ibv_query_gid_ex``: the entry of the port's one GID (index 0)."""
        return self._gid_entry(port_num, gid_index, "Failed to query gid")

    def query_gid_table(self, max_entries: int, flags: int = 0) -> list[GIDEntry]:
        """``ibv_query_gid_table``: one entry per port; EINVAL when ``max_entries`` cannot
        hold them [inferred]. The call returns a negative errno and pyverbs raises with it as
        is (ibv_query_gid_table(3) "negative errno value on error"; rdma-core
        tests/test_device.py::test_query_gid_table_bad_flow expects ``-errno.EINVAL``)."""
        what = "Failed to query gid tables of the device"
        self._check_open(what)
        entries = [self._gid_entry(p.num, 0, what) for p in self._nic.ports]
        if max_entries < len(entries):
            raise PyverbsRDMAError(what, -errno.EINVAL)
        return entries

    def query_gid_type(self, port_num: int, index: int) -> int:
        """``ibv_query_gid_type``: IB_ROCE_V1 (0) on InfiniBand ports, ROCE_V2 (1) on
        Ethernet ones (``ibv_gid_type_sysfs``)."""
        self._gid_entry(port_num, index, "Failed to query gid type")
        sysfs = V.ENUMS["ibv_gid_type_sysfs"]
        port = self._nic.ports[port_num - 1]
        return int(sysfs.IBV_GID_TYPE_SYSFS_IB_ROCE_V1 if port.link_layer == 1 else
                   sysfs.IBV_GID_TYPE_SYSFS_ROCE_V2)

    def query_pkey(self, port_num: int, index: int) -> int:
        """``ibv_query_pkey``: the default full-membership P_Key 0xffff at index 0."""
        self._port(port_num, "Failed to query pkey")
        if index != 0:
            raise PyverbsRDMAError("Failed to query pkey", errno.EINVAL)
        return 0xFFFF

    def __getattr__(self, name: str) -> Any:
        if name in CONTEXT_NOT_MODELLED:
            def not_modelled(*args: object, **kwargs: object) -> Any:
                raise NotModelledError(f"kvreg's fake pyverbs does not model "
                                       f"Context.{name} ({COVERAGE_HINT})")
            return not_modelled
        raise AttributeError(f"'Context' object has no attribute {name!r}")

    # -- lifetime -------------------------------------------------------------------------
    def add_ref(self, obj: Any) -> None:
        self._children.add(obj)

    def close(self) -> None:
        """Close dependents (PDs, CQs, QPs, MRs), then the context; closing twice is a no-op."""
        if self._closed:
            return
        for child in list(self._children):
            child.close()
        self._closed = True

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Context:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def bind_context(node: Node) -> type[Context]:
    """The Context class of one node (so ``Context(name=...)`` finds that node's NICs)."""
    return type("Context", (Context,), {"_node": node, "__module__": "pyverbs.device",
                                        "__doc__": Context.__doc__})


def device_list_function(node: Node) -> Callable[[], list[Device]]:
    """``get_device_list()`` of one node: its NICs in the order they were added."""

    def get_device_list() -> list[Device]:
        """The node's RDMA devices; names are bytes (§4.3)."""
        if not node.rdma_stack:
            raise PyverbsRDMAError("Failed to get devices list")
        return [Device(nic.name.encode(), int(V.ibv_node_type.IBV_NODE_CA),
                       int(V.ibv_transport_type.IBV_TRANSPORT_IB), nic.guid, nic.index)
                for nic in node.nics.values()]

    return get_device_list
