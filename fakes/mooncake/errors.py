"""Mooncake's error codes and the store's fault points (docs/mooncake-verbs.md §1.1, §1.4).

The store never raises for store errors: it returns the negative ``ErrorCode`` value (§1.1).
The transfer engine has its own small int codes (``TeError``), and the store collapses any
non-zero register/unregister code into ``INVALID_PARAMS`` (-600) (§1.4, last paragraph).
"""

from __future__ import annotations

import enum
from typing import Any

from ..faults import register_points

__all__ = ["ENGINE_POINTS", "MOONCAKE_POINTS", "EngineCrash", "ErrorCode", "StoreCrash", "TeError",
           "error_name", "te_error_name"]


class StoreCrash(RuntimeError):
    """A call the real store answers with a segfault (SIGSEGV): the binding dereferences
    its null client before ``setup()`` or after ``close()`` (docs/mooncake-verbs.md §7,
    checked on 0.3.13.post1). The fake raises this so such code is caught, not handled."""


class EngineCrash(RuntimeError):
    """A ``mooncake.engine.TransferEngine`` call the real binding answers with a segfault:
    before ``initialize()`` its engine pointer is null (docs/mooncake-verbs.md §8.1, checked
    on 0.3.13.post1). The fake raises this so such code is caught, not handled."""


class ErrorCode(enum.IntEnum):
    """``mooncake-store/include/types.h`` ``enum class ErrorCode : int32_t`` (§1.4).

    The ``DFS_*`` codes (-1600…-1605) are left out: the spec gives their range, not names.
    """

    OK = 0
    INTERNAL_ERROR = -1
    BUFFER_OVERFLOW = -10
    SHARD_INDEX_OUT_OF_RANGE = -100
    SEGMENT_NOT_FOUND = -101
    SEGMENT_ALREADY_EXISTS = -102
    CLIENT_NOT_FOUND = -103
    NO_AVAILABLE_HANDLE = -200
    INVALID_VERSION = -300
    INVALID_KEY = -400
    WRITE_FAIL = -500
    INVALID_PARAMS = -600
    ILLEGAL_CLIENT = -601
    INVALID_WRITE = -700
    INVALID_READ = -701
    INVALID_REPLICA = -702
    REPLICA_IS_NOT_READY = -703
    OBJECT_NOT_FOUND = -704
    OBJECT_ALREADY_EXISTS = -705
    OBJECT_HAS_LEASE = -706
    LEASE_EXPIRED = -707
    OBJECT_HAS_REPLICATION_TASK = -708
    OBJECT_NO_REPLICATION_TASK = -709
    REPLICA_NOT_FOUND = -710
    REPLICA_ALREADY_EXISTS = -711
    REPLICA_IS_GONE = -712
    REPLICA_NOT_IN_LOCAL_MEMORY = -713
    OBJECT_REPLICA_BUSY = -714
    TRANSFER_FAIL = -800
    CHECKSUM_MISMATCH = -801
    RPC_FAIL = -900
    RPC_TIMEOUT = -901
    ETCD_OPERATION_ERROR = -1000
    ETCD_KEY_NOT_EXIST = -1001
    ETCD_TRANSACTION_FAIL = -1002
    ETCD_CTX_CANCELLED = -1003
    OPLOG_ENTRY_NOT_FOUND = -1004
    K8S_LEASE_OPERATION_ERROR = -1005
    K8S_LEASE_NOT_FOUND = -1006
    INCOMPLETE_OPLOG_CATCH_UP = -1007
    UNAVAILABLE_IN_CURRENT_STATUS = -1010
    UNAVAILABLE_IN_CURRENT_MODE = -1011
    NOT_SUPPORTED = -1012
    FILE_NOT_FOUND = -1100
    FILE_OPEN_FAIL = -1101
    FILE_READ_FAIL = -1102
    FILE_WRITE_FAIL = -1103
    FILE_INVALID_BUFFER = -1104
    FILE_LOCK_FAIL = -1105
    FILE_INVALID_HANDLE = -1106
    BUCKET_NOT_FOUND = -1200
    BUCKET_ALREADY_EXISTS = -1201
    KEYS_EXCEED_BUCKET_LIMIT = -1202
    KEYS_ULTRA_LIMIT = -1203
    UNABLE_OFFLOAD = -1300
    UNABLE_OFFLOADING = -1301
    TASK_NOT_FOUND = -1400
    TASK_PENDING_LIMIT_EXCEEDED = -1401
    JOB_NOT_FOUND = -1402
    SERIALIZE_UNSUPPORTED = -1500
    SERIALIZE_FAIL = -1501
    DESERIALIZE_FAIL = -1502
    PERSISTENT_FAIL = -1503
    TENANT_QUOTA_EXCEEDED = -1700
    TENANT_NOT_REGISTERED = -1701
    TENANT_NOT_EMPTY = -1702


class TeError(enum.IntEnum):
    """Transfer-engine int codes (``mooncake-transfer-engine/include/error.h``, §1.4)."""

    OK = 0
    ERR_INVALID_ARGUMENT = -1
    ERR_TOO_MANY_REQUESTS = -2
    ERR_ADDRESS_NOT_REGISTERED = -3
    ERR_BATCH_BUSY = -4
    ERR_DEVICE_NOT_FOUND = -6
    ERR_ADDRESS_OVERLAPPED = -7
    ERR_DNS = -101
    ERR_SOCKET = -102
    ERR_MALFORMED_JSON = -103
    ERR_REJECT_HANDSHAKE = -104
    ERR_METADATA = -200
    ERR_ENDPOINT = -201
    ERR_CONTEXT = -202
    ERR_NUMA = -300
    ERR_CLOCK = -301
    ERR_MEMORY = -302
    ERR_NOT_IMPLEMENTED = -303


def error_name(code: int) -> str:
    """``-800`` -> ``"TRANSFER_FAIL"``; unknown codes print as themselves."""
    try:
        return ErrorCode(int(code)).name
    except ValueError:
        return str(code)


def _code_for(name_or_code: Any) -> int:
    if isinstance(name_or_code, bool):
        raise TypeError("an ErrorCode must be an int or a name, not bool")
    if isinstance(name_or_code, int):
        return int(name_or_code)
    if isinstance(name_or_code, str):
        name = name_or_code.removeprefix("ErrorCode.")
        if name in ErrorCode.__members__:
            return int(ErrorCode[name])
        raise ValueError(f"unknown Mooncake ErrorCode name {name_or_code!r}")
    raise TypeError(f"cannot read a Mooncake ErrorCode from {type(name_or_code).__name__}")


def _codes(*names: str) -> frozenset[int]:
    return frozenset(int(ErrorCode[n]) for n in names)


_RPC = ("RPC_FAIL", "RPC_TIMEOUT")
# point -> the codes that store call can really return. register_buffer/unregister_buffer
# can only return INVALID_PARAMS: every TE failure is collapsed into it (§1.4).
MOONCAKE_POINTS: dict[str, frozenset[int]] = {
    "mooncake.setup": _codes("INTERNAL_ERROR", "INVALID_PARAMS", *_RPC),
    "mooncake.register_buffer": _codes("INVALID_PARAMS"),
    "mooncake.unregister_buffer": _codes("INVALID_PARAMS"),
    # one check per key: a batch can fail one key and not the others
    "mooncake.put": _codes("INTERNAL_ERROR", "NO_AVAILABLE_HANDLE", "INVALID_PARAMS",
                           "TRANSFER_FAIL", *_RPC),
    "mooncake.get": _codes("INTERNAL_ERROR", "INVALID_PARAMS", "INVALID_REPLICA",
                           "REPLICA_IS_NOT_READY", "OBJECT_NOT_FOUND", "LEASE_EXPIRED",
                           "TRANSFER_FAIL", "CHECKSUM_MISMATCH", *_RPC),
    "mooncake.is_exist": _codes("INTERNAL_ERROR", *_RPC),
    # §1.2: OBJECT_HAS_LEASE is the likely code while a read lease is held [inferred]
    "mooncake.remove": _codes("INTERNAL_ERROR", "OBJECT_NOT_FOUND", "OBJECT_HAS_LEASE", *_RPC),
}

register_points(MOONCAKE_POINTS, code_for=_code_for, error_name=error_name)


def te_error_name(code: int) -> str:
    """``-7`` -> ``"ERR_ADDRESS_OVERLAPPED"``; unknown codes print as themselves."""
    try:
        return TeError(int(code)).name
    except ValueError:
        return str(code)


def _te_code_for(name_or_code: Any) -> int:
    if isinstance(name_or_code, bool):
        raise TypeError("a transfer-engine code must be an int or a name, not bool")
    if isinstance(name_or_code, int):
        return int(name_or_code)
    if isinstance(name_or_code, str):
        name = name_or_code.removeprefix("TeError.")
        if name in TeError.__members__:
            return int(TeError[name])
        raise ValueError(f"unknown Mooncake transfer-engine code name {name_or_code!r}")
    raise TypeError(f"cannot read a transfer-engine code from {type(name_or_code).__name__}")


def _te(*names: str) -> frozenset[int]:
    return frozenset(int(TeError[n]) for n in names)


# point -> the codes that TransferEngine method can really return (docs/mooncake-verbs.md §8):
# registration: zero length -1, overlap -7, an ibv_reg_mr failure -202 ERR_CONTEXT (rdma);
# unregister: -3 for an address that is not a base; transfers: -1 for every failure
_XFER = _te("ERR_INVALID_ARGUMENT")
ENGINE_POINTS: dict[str, frozenset[int]] = {
    "mooncake.engine.initialize": _te("ERR_INVALID_ARGUMENT"),
    "mooncake.engine.register_memory": _te("ERR_INVALID_ARGUMENT", "ERR_ADDRESS_OVERLAPPED",
                                           "ERR_CONTEXT"),
    "mooncake.engine.unregister_memory": _te("ERR_INVALID_ARGUMENT",
                                             "ERR_ADDRESS_NOT_REGISTERED"),
    "mooncake.engine.batch_register_memory": _te("ERR_INVALID_ARGUMENT",
                                                 "ERR_ADDRESS_OVERLAPPED", "ERR_CONTEXT"),
    "mooncake.engine.batch_unregister_memory": _te("ERR_INVALID_ARGUMENT",
                                                   "ERR_ADDRESS_NOT_REGISTERED"),
    "mooncake.engine.transfer_sync_write": _XFER,
    "mooncake.engine.transfer_sync_read": _XFER,
    "mooncake.engine.batch_transfer_sync_write": _XFER,
    "mooncake.engine.batch_transfer_sync_read": _XFER,
    # an async batch that fails: its id's status is -1 (get_batch_transfer_status)
    "mooncake.engine.batch_transfer_async_write": _XFER,
    "mooncake.engine.batch_transfer_async_read": _XFER,
}

register_points(ENGINE_POINTS, code_for=_te_code_for, error_name=te_error_name)
