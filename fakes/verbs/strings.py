"""The ``*_to_str`` helpers of pyverbs (``pyverbs.utils``, ``pyverbs.device``, ``.qp``,
``.wr``, ``.cq``, ``.mr``): the words rdma-core's tests print for enum values.

Flag names come from the generated enum table (verbs.h), so they follow the header; the
words for single values are the ones rdma-core v44's pyverbs prints, checked value by
value against the real module by the conformance test.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

from .enums import ENUMS
from .errors import PyverbsUserError

__all__ = ["access_flags_to_str", "be64toh", "cqe_flags_to_str", "cqe_opcode_to_str",
           "cqe_status_to_str", "create_wc_flags_to_str", "flags_to_str", "gid_str",
           "gid_str_to_array", "guid_format", "guid_to_hex", "mig_state_to_str",
           "mtu_to_str", "phys_state_to_str", "port_state_to_str", "qp_state_to_str",
           "qp_type_to_str", "rereg_error_to_str", "send_flags_to_str", "speed_to_str",
           "str_from_flags", "translate_device_caps", "translate_event_type",
           "translate_gid_type", "translate_link_layer", "translate_mtu",
           "translate_node_type", "translate_port_cap_flags", "translate_port_cap_flags2",
           "translate_transport_type", "width_to_str"]


def _members(enum_name: str) -> dict[int, str]:
    return {int(m.value): name for name, m in ENUMS[enum_name].__members__.items()}


def be64toh(num: int) -> int:
    """Byte-swap a 64-bit value (the GID halves are big-endian in the C struct)."""
    return int(struct.unpack("Q", struct.pack("!Q", num))[0])


def gid_str(subnet_prefix: int, interface_id: int) -> str:
    """A GID as 8 groups of 4 hex digits, from the two raw (big-endian) halves."""
    digits = f"{be64toh(subnet_prefix):016x}{be64toh(interface_id):016x}"
    return ":".join(digits[i:i + 4] for i in range(0, 32, 4))


def gid_str_to_array(val: str) -> list[str]:
    """``'xxxx:...'`` (8 groups of 4) -> the 16 two-digit byte strings."""
    groups = val.split(":")
    if len(groups) != 8 or any(len(g) != 4 for g in groups):
        raise PyverbsUserError(f"Invalid GID value ({groups})")
    int("".join(groups), 16)
    return [g[i:i + 2] for g in groups for i in (0, 2)]


def _lookup(table: Mapping[int, str], value: int, unknown: str) -> str:
    return table.get(value, unknown)


_QP_TYPES = {2: "RC", 3: "UC", 4: "UD", 8: "Raw Packet", 9: "XRCD_SEND", 10: "XRCD_RECV",
             0xFF: "Driver QP"}
_QP_STATES = {0: "Reset", 1: "Init", 2: "RTR", 3: "RTS", 4: "SQD", 5: "SQE", 6: "Error",
              7: "Unknown"}
_MTUS = {1: 256, 2: 512, 3: 1024, 4: 2048, 5: 4096}
_ACCESS = {1: "Local write", 2: "Remote write", 4: "Remote read", 8: "Remote atomic",
           16: "MW bind", 32: "Zero based", 64: "On demand"}
_MIG = {0: "Migrated", 1: "Re-arm", 2: "Armed"}


def qp_type_to_str(qp_type: int) -> str:
    return _lookup(_QP_TYPES, qp_type, f"Unknown ({qp_type})")


def qp_state_to_str(qp_state: int) -> str:
    return _lookup(_QP_STATES, qp_state, f"Unknown ({qp_state})")


def mtu_to_str(mtu: int) -> int:
    """The MTU in bytes; 0 for an unknown code."""
    return _MTUS.get(mtu, 0)


def access_flags_to_str(flags: int) -> str:
    return "".join(f"{name} " for bit, name in _ACCESS.items() if flags & bit)


def mig_state_to_str(mig: int) -> str:
    return _lookup(_MIG, mig, f"Unknown ({mig})")


def rereg_error_to_str(error: int) -> str:
    return _lookup(_members("ibv_rereg_mr_err_code"), error, f"Unknown error ({error})")


# -- pyverbs.device -----------------------------------------------------------------------

_PORT_STATES = {0: "NOP", 1: "Down", 2: "Init", 3: "Armed", 4: "Active", 5: "Defer"}
_PHYS = {1: "Sleep", 2: "Polling", 3: "Disabled", 4: "Port configuration training",
         5: "Link up", 6: "Link error recovery", 7: "Phy test"}
_SPEEDS = {0: "0.0 Gbps", 1: "2.5 Gbps", 2: "5.0 Gbps", 4: "5.0 Gbps", 8: "10.0 Gbps",
           16: "14.0 Gbps", 32: "25.0 Gbps", 64: "50.0 Gbps", 128: "100.0 Gbps"}
_WIDTHS = {1: "1X", 2: "4X", 4: "8X", 16: "2X"}
_LINK = {0: "Unspecified", 1: "InfiniBand", 2: "Ethernet"}
_NODE = {1: "CA", 2: "Switch", 3: "Router", 4: "RNIC", 5: "USNIC", 6: "USNIC UDP"}
_TRANSPORT = {0: "IB", 1: "IWARP", 2: "USNIC", 3: "USNIC UDP"}
_GID_TYPE = {0: "IB", 1: "RoCEv1", 2: "RoCEv2"}


def port_state_to_str(port_state: int) -> str:
    name = _PORT_STATES.get(port_state)
    return f"{name} ({port_state})" if name else f"Invalid state ({port_state})"


def phys_state_to_str(phys: int) -> str:
    name = _PHYS.get(phys)
    return f"{name} ({phys})" if name else "Invalid physical state"


def speed_to_str(speed: int) -> str:
    name = _SPEEDS.get(speed)
    return f"{name} ({speed})" if name else "Invalid speed"


def width_to_str(width: int) -> str:
    name = _WIDTHS.get(width)
    return f"{name} ({width})" if name else "Invalid width"


def translate_link_layer(ll: int) -> str:
    return _lookup(_LINK, ll, f"Invalid link layer ({ll})")


def translate_mtu(mtu: int) -> str:
    return f"{_MTUS[mtu]} ({mtu})" if mtu in _MTUS else f"Invalid MTU ({mtu})"


def translate_node_type(node_type: int) -> str:
    return _lookup(_NODE, node_type, "Unknown")


def translate_transport_type(transport_type: int) -> str:
    return _lookup(_TRANSPORT, transport_type, "Unknown")


def translate_gid_type(gid_type: int) -> str:
    return _lookup(_GID_TYPE, gid_type, f"Unknown gid_type ({gid_type})")


def translate_event_type(event_type: int) -> str:
    names = _members("ibv_event_type")
    # rdma-core v44's table spells this one with a leading dot
    names[16] = "." + names[16]
    return _lookup(names, event_type, f"Unknown event_type ({event_type})")


def str_from_flags(flags: int, dictionary: Mapping[int, str]) -> str:
    """One name per set bit, each on its own indented line (as ``ibv_devinfo -v``)."""
    return "\n  " + "".join(f"{name}\n  " for bit, name in dictionary.items() if flags & bit)


def translate_device_caps(caps: int) -> str:
    return str_from_flags(caps, _members("ibv_device_cap_flags"))


def translate_port_cap_flags(flags: int) -> str:
    return str_from_flags(flags, _members("ibv_port_cap_flags"))


def translate_port_cap_flags2(flags: int) -> str:
    return str_from_flags(flags, _members("ibv_port_cap_flags2"))


def guid_to_hex(guid: int) -> str:
    return f"{guid:x}"


def guid_format(num: int) -> str:
    """A GUID in 4 groups of 4 hex digits, byte order swapped as the C field is stored."""
    digits = f"{be64toh(num):016x}"
    return ":".join(digits[i:i + 4] for i in range(0, 16, 4))


# -- pyverbs.wr / pyverbs.cq --------------------------------------------------------------

def flags_to_str(flags: int, dictionary: Mapping[int, str]) -> str:
    return "".join(f"{name} " for bit, name in dictionary.items() if flags & bit)


def send_flags_to_str(flags: int) -> str:
    return flags_to_str(flags, _members("ibv_send_flags"))


_CQE_FLAGS = {1: "GRH", 2: "With immediate", 4: "IP csum OK", 8: "With invalidate",
              16: "TM sync request", 32: "TM match", 64: "TM data valid"}


def cqe_flags_to_str(flags: int) -> str:
    return flags_to_str(flags, _CQE_FLAGS)


def create_wc_flags_to_str(flags: int) -> str:
    names = _members("ibv_create_cq_wc_flags")
    names.pop(1 << 10, None)        # v44's table has no IBV_WC_EX_WITH_TM_INFO
    return flags_to_str(flags, names)


_CQE_STATUS = ["success", "local length error", "local QP op error", "local EEC op error",
               "local protection error", "WR flush error", "memory window bind error",
               "bad response error", "local access error", "remote invalidate request error",
               "remote access error", "remote op error", "retry exceeded error",
               "RNR retry exceeded", "local RDD violation error",
               "remote invalidate RD request error", "remote abort error",
               "invalidate EECN error", "invalidate EEC state error", "WC fatal error",
               "response timeout error", "general error"]


def cqe_status_to_str(status: int) -> str:
    return _CQE_STATUS[status] if 0 <= status < len(_CQE_STATUS) else "Unknown CQE status"


_CQE_OPCODES = {0: "Send", 1: "RDMA write", 2: "RDMA read", 3: "Compare and swap",
                4: "Fetch and add", 5: "Bind Memory window", 6: "Local invalidate", 7: "TSO",
                128: "Receive", 129: "Receive RDMA with immediate",
                130: "Tag matching - add", 131: "Tag matching - delete",
                132: "Tag matching - sync", 133: "Tag matching - receive",
                134: "Tag matching - no tag", 135: "Driver WR"}


def cqe_opcode_to_str(opcode: int) -> str:
    return _lookup(_CQE_OPCODES, opcode, f"Unknown CQE opcode {opcode}")
