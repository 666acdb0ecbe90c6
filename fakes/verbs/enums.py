"""ibverbs enum values, in both pyverbs generations (mooncake-verbs.md §4.1, §4.6).

rdma-core < v59 exposed module-level ints (``pyverbs.enums.IBV_ACCESS_LOCAL_WRITE``);
v59+ exposes enum classes in ``pyverbs.libibverbs_enums``
(``ibv_access_flags.IBV_ACCESS_LOCAL_WRITE``). Both are built here from one table of
values (``libibverbs/verbs.h``), so the two generations can never disagree. Bit-mask enums
are ``IntFlag``, the others ``IntEnum``; both compare equal to the plain ints of the old
generation.
"""

from __future__ import annotations

import enum
import types

__all__ = ["ENUM_CLASSES", "MODULE_CONSTANTS", "ibv_access_flags", "ibv_mtu", "ibv_node_type",
           "ibv_port_state", "ibv_qp_attr_mask", "ibv_qp_state", "ibv_qp_type",
           "ibv_send_flags", "ibv_transport_type", "ibv_wc_opcode", "ibv_wc_status",
           "ibv_wr_opcode", "new_generation_module", "old_generation_module"]


class ibv_access_flags(enum.IntFlag):
    """MR and QP access bits (§4.6); RELAXED_ORDERING is the first optional bit."""

    IBV_ACCESS_LOCAL_WRITE = 1
    IBV_ACCESS_REMOTE_WRITE = 1 << 1
    IBV_ACCESS_REMOTE_READ = 1 << 2
    IBV_ACCESS_REMOTE_ATOMIC = 1 << 3
    IBV_ACCESS_MW_BIND = 1 << 4
    IBV_ACCESS_ZERO_BASED = 1 << 5
    IBV_ACCESS_ON_DEMAND = 1 << 6
    IBV_ACCESS_HUGETLB = 1 << 7
    IBV_ACCESS_FLUSH_GLOBAL = 1 << 8
    IBV_ACCESS_FLUSH_PERSISTENT = 1 << 9
    IBV_ACCESS_RELAXED_ORDERING = 1 << 20
    IBV_ACCESS_OPTIONAL_FIRST = 1 << 20   # alias: the optional range starts here


class ibv_wc_status(enum.IntEnum):
    """Work-completion status (§4.6); 4 and 10 are the protection errors of §5.3."""

    IBV_WC_SUCCESS = 0
    IBV_WC_LOC_LEN_ERR = 1
    IBV_WC_LOC_QP_OP_ERR = 2
    IBV_WC_LOC_EEC_OP_ERR = 3
    IBV_WC_LOC_PROT_ERR = 4
    IBV_WC_WR_FLUSH_ERR = 5
    IBV_WC_MW_BIND_ERR = 6
    IBV_WC_BAD_RESP_ERR = 7
    IBV_WC_LOC_ACCESS_ERR = 8
    IBV_WC_REM_INV_REQ_ERR = 9
    IBV_WC_REM_ACCESS_ERR = 10
    IBV_WC_REM_OP_ERR = 11
    IBV_WC_RETRY_EXC_ERR = 12
    IBV_WC_RNR_RETRY_EXC_ERR = 13
    IBV_WC_LOC_RDD_VIOL_ERR = 14
    IBV_WC_REM_INV_RD_REQ_ERR = 15
    IBV_WC_REM_ABORT_ERR = 16
    IBV_WC_INV_EECN_ERR = 17
    IBV_WC_INV_EEC_STATE_ERR = 18
    IBV_WC_FATAL_ERR = 19
    IBV_WC_RESP_TIMEOUT_ERR = 20
    IBV_WC_GENERAL_ERR = 21
    IBV_WC_TM_ERR = 22
    IBV_WC_TM_RNDV_INCOMPLETE = 23


class ibv_wr_opcode(enum.IntEnum):
    """Send work-request opcodes (§4.6)."""

    IBV_WR_RDMA_WRITE = 0
    IBV_WR_RDMA_WRITE_WITH_IMM = 1
    IBV_WR_SEND = 2
    IBV_WR_SEND_WITH_IMM = 3
    IBV_WR_RDMA_READ = 4
    IBV_WR_ATOMIC_CMP_AND_SWP = 5
    IBV_WR_ATOMIC_FETCH_AND_ADD = 6
    IBV_WR_LOCAL_INV = 7
    IBV_WR_BIND_MW = 8
    IBV_WR_SEND_WITH_INV = 9
    IBV_WR_TSO = 10
    IBV_WR_DRIVER1 = 11
    IBV_WR_FLUSH = 14
    IBV_WR_ATOMIC_WRITE = 15


class ibv_wc_opcode(enum.IntEnum):
    """Completion opcodes (§4.6)."""

    IBV_WC_SEND = 0
    IBV_WC_RDMA_WRITE = 1
    IBV_WC_RDMA_READ = 2
    IBV_WC_COMP_SWAP = 3
    IBV_WC_FETCH_ADD = 4
    IBV_WC_BIND_MW = 5
    IBV_WC_LOCAL_INV = 6
    IBV_WC_TSO = 7
    IBV_WC_RECV = 128
    IBV_WC_RECV_RDMA_WITH_IMM = 129


class ibv_send_flags(enum.IntFlag):
    """Send flags (§4.6); SIGNALED decides whether a successful WR makes a completion."""

    IBV_SEND_FENCE = 1
    IBV_SEND_SIGNALED = 1 << 1
    IBV_SEND_SOLICITED = 1 << 2
    IBV_SEND_INLINE = 1 << 3
    IBV_SEND_IP_CSUM = 1 << 4


class ibv_qp_type(enum.IntEnum):
    """QP transport types (verbs.h); only RC carries traffic in the fake."""

    IBV_QPT_RC = 2
    IBV_QPT_UC = 3
    IBV_QPT_UD = 4
    IBV_QPT_RAW_PACKET = 8
    IBV_QPT_XRC_SEND = 9
    IBV_QPT_XRC_RECV = 10
    IBV_QPT_DRIVER = 0xFF


class ibv_qp_state(enum.IntEnum):
    """QP states (verbs.h): RESET→INIT→RTR→RTS, and ERR after a failed WR (§5.3)."""

    IBV_QPS_RESET = 0
    IBV_QPS_INIT = 1
    IBV_QPS_RTR = 2
    IBV_QPS_RTS = 3
    IBV_QPS_SQD = 4
    IBV_QPS_SQE = 5
    IBV_QPS_ERR = 6
    IBV_QPS_UNKNOWN = 7


class ibv_qp_attr_mask(enum.IntFlag):
    """``ibv_modify_qp`` attribute mask bits (verbs.h)."""

    IBV_QP_STATE = 1 << 0
    IBV_QP_CUR_STATE = 1 << 1
    IBV_QP_EN_SQD_ASYNC_NOTIFY = 1 << 2
    IBV_QP_ACCESS_FLAGS = 1 << 3
    IBV_QP_PKEY_INDEX = 1 << 4
    IBV_QP_PORT = 1 << 5
    IBV_QP_QKEY = 1 << 6
    IBV_QP_AV = 1 << 7
    IBV_QP_PATH_MTU = 1 << 8
    IBV_QP_TIMEOUT = 1 << 9
    IBV_QP_RETRY_CNT = 1 << 10
    IBV_QP_RNR_RETRY = 1 << 11
    IBV_QP_RQ_PSN = 1 << 12
    IBV_QP_MAX_QP_RD_ATOMIC = 1 << 13
    IBV_QP_ALT_PATH = 1 << 14
    IBV_QP_MIN_RNR_TIMER = 1 << 15
    IBV_QP_SQ_PSN = 1 << 16
    IBV_QP_MAX_DEST_RD_ATOMIC = 1 << 17
    IBV_QP_PATH_MIG_STATE = 1 << 18
    IBV_QP_CAP = 1 << 19
    IBV_QP_DEST_QPN = 1 << 20
    IBV_QP_RATE_LIMIT = 1 << 25


class ibv_mtu(enum.IntEnum):
    """Path MTU codes (verbs.h)."""

    IBV_MTU_256 = 1
    IBV_MTU_512 = 2
    IBV_MTU_1024 = 3
    IBV_MTU_2048 = 4
    IBV_MTU_4096 = 5


class ibv_port_state(enum.IntEnum):
    """Port states; rdma-core's tests need ACTIVE (§4.7)."""

    IBV_PORT_NOP = 0
    IBV_PORT_DOWN = 1
    IBV_PORT_INIT = 2
    IBV_PORT_ARMED = 3
    IBV_PORT_ACTIVE = 4
    IBV_PORT_ACTIVE_DEFER = 5


class ibv_node_type(enum.IntEnum):
    """``Device.node_type`` values (verbs.h)."""

    IBV_NODE_UNKNOWN = -1
    IBV_NODE_CA = 1
    IBV_NODE_SWITCH = 2
    IBV_NODE_ROUTER = 3
    IBV_NODE_RNIC = 4
    IBV_NODE_USNIC = 5
    IBV_NODE_USNIC_UDP = 6


class ibv_transport_type(enum.IntEnum):
    """``Device.transport_type`` values (verbs.h)."""

    IBV_TRANSPORT_UNKNOWN = -1
    IBV_TRANSPORT_IB = 0
    IBV_TRANSPORT_IWARP = 1
    IBV_TRANSPORT_USNIC = 2
    IBV_TRANSPORT_USNIC_UDP = 3


ENUM_CLASSES: tuple[type[enum.Enum], ...] = (
    ibv_access_flags, ibv_wc_status, ibv_wr_opcode, ibv_wc_opcode, ibv_send_flags,
    ibv_qp_type, ibv_qp_state, ibv_qp_attr_mask, ibv_mtu, ibv_port_state, ibv_node_type,
    ibv_transport_type)

# anonymous enums of verbs.h: plain constants in both generations
MODULE_CONSTANTS: dict[str, int] = {
    "IBV_LINK_LAYER_UNSPECIFIED": 0,
    "IBV_LINK_LAYER_INFINIBAND": 1,
    "IBV_LINK_LAYER_ETHERNET": 2,
}

# access bits below the optional range that a device must understand (§4.6)
MANDATORY_ACCESS_MASK = (1 << 20) - 1
OPTIONAL_ACCESS_MASK = ~MANDATORY_ACCESS_MASK


def _members(cls: type[enum.Enum]) -> dict[str, enum.Enum]:
    return dict(cls.__members__)


def old_generation_module(name: str = "pyverbs.enums") -> types.ModuleType:
    """``pyverbs.enums`` of rdma-core < v59: every member as a plain module-level int."""
    mod = types.ModuleType(name, "kvreg fake: ibverbs enum values as module constants "
                                 "(rdma-core < v59 layout)")
    for cls in ENUM_CLASSES:
        for member_name, member in _members(cls).items():
            setattr(mod, member_name, int(member.value))
    for const, value in MODULE_CONSTANTS.items():
        setattr(mod, const, value)
    return mod


def new_generation_module(name: str = "pyverbs.libibverbs_enums") -> types.ModuleType:
    """``pyverbs.libibverbs_enums`` of rdma-core >= v59: enum classes (and their members)."""
    mod = types.ModuleType(name, "kvreg fake: ibverbs enum classes (rdma-core >= v59 layout)")
    for cls in ENUM_CLASSES:
        setattr(mod, cls.__name__, cls)
        for member_name, member in _members(cls).items():
            setattr(mod, member_name, member)
    for const, value in MODULE_CONSTANTS.items():
        setattr(mod, const, value)
    return mod
