"""ErrorCode values, TE codes and the two behaviour profiles (docs/mooncake-verbs.md §1.4-§1.7)."""

from __future__ import annotations

import pytest

from kvreg.fakes.mooncake import STORE_PROFILES, ErrorCode, TeError, get_store_profile
from kvreg.fakes.mooncake.errors import error_name
from kvreg.fakes.verbs.enums import ibv_access_flags as A


def test_error_code_values() -> None:
    # §1.4, spot values across every group
    want = {"OK": 0, "INTERNAL_ERROR": -1, "BUFFER_OVERFLOW": -10, "SEGMENT_NOT_FOUND": -101,
            "NO_AVAILABLE_HANDLE": -200, "INVALID_KEY": -400, "INVALID_PARAMS": -600,
            "ILLEGAL_CLIENT": -601, "OBJECT_NOT_FOUND": -704, "OBJECT_ALREADY_EXISTS": -705,
            "OBJECT_HAS_LEASE": -706, "OBJECT_REPLICA_BUSY": -714, "TRANSFER_FAIL": -800,
            "CHECKSUM_MISMATCH": -801, "RPC_FAIL": -900, "RPC_TIMEOUT": -901,
            "ETCD_OPERATION_ERROR": -1000, "INCOMPLETE_OPLOG_CATCH_UP": -1007,
            "NOT_SUPPORTED": -1012, "FILE_INVALID_HANDLE": -1106, "KEYS_ULTRA_LIMIT": -1203,
            "JOB_NOT_FOUND": -1402, "PERSISTENT_FAIL": -1503, "TENANT_NOT_EMPTY": -1702}
    for name, value in want.items():
        assert ErrorCode[name] == value
    assert len({c.value for c in ErrorCode}) == len(ErrorCode)   # no aliases
    assert all(c.value <= 0 for c in ErrorCode)
    assert error_name(-800) == "TRANSFER_FAIL" and error_name(-12345) == "-12345"


def test_transfer_engine_codes() -> None:
    # §1.4: mooncake-transfer-engine/include/error.h
    assert (TeError.ERR_INVALID_ARGUMENT, TeError.ERR_ADDRESS_NOT_REGISTERED,
            TeError.ERR_DEVICE_NOT_FOUND, TeError.ERR_ADDRESS_OVERLAPPED,
            TeError.ERR_MEMORY, TeError.ERR_NOT_IMPLEMENTED) == (-1, -3, -6, -7, -302, -303)


def test_released_profile() -> None:
    # §1.6 / §1.7 / §1.5 for v0.3.12.post1
    p = get_store_profile("released")
    assert p.max_mr_size_default == 0x10000000000 == 1 << 40          # 1 TiB, not 10 GB
    assert p.reads_mc_max_mr_size                                     # v0.3.11+
    assert p.store_limit_protocols == {"rdma", "tcp", "efa", "cxi"}   # every protocol
    assert not p.te_splits_mrs and not p.slices_split_at_mr_seams
    assert p.user_buffer_access == int(A.IBV_ACCESS_LOCAL_WRITE | A.IBV_ACCESS_REMOTE_WRITE |
                                       A.IBV_ACCESS_REMOTE_READ)
    assert (p.slice_size, p.fragment_limit) == (65536, 16384)
    assert p.max_slice_size == (1 << 24) - 16                         # kMaxSliceSize
    # [uncertain]/[inferred] switches and their conservative defaults
    assert p.tail_absorb_inclusive and not p.store_memcpy
    assert p.duplicate_key_winner == "last"


def test_head_profile() -> None:
    # §1.6: HEAD splits MRs (#2644), splits slices (#3198), limit only for efa/cxi (#3486);
    # §1.5: LOCAL_WRITE only (#3151), relaxed ordering on by default [doc]
    p = get_store_profile("head")
    assert p.te_splits_mrs and p.slices_split_at_mr_seams
    assert p.store_limit_protocols == {"efa", "cxi"}
    assert p.user_buffer_access == int(A.IBV_ACCESS_LOCAL_WRITE) and p.relaxed_ordering


def test_profile_lookup_and_replace() -> None:
    assert set(STORE_PROFILES) == {"released", "v0.3.13", "head"}
    assert get_store_profile() is STORE_PROFILES["released"]
    with pytest.raises(ValueError, match="known"):
        get_store_profile("v0.4")
    old = get_store_profile("released").replace(reads_mc_max_mr_size=False, version="v0.3.10")
    assert not old.reads_mc_max_mr_size
    with pytest.raises(TypeError, match="bogus"):
        old.replace(bogus=1)
