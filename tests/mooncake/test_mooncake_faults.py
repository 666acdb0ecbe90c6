"""Fault injection on every store point (ARCHITECTURE.md#fault-plans; docs/mooncake-verbs.md
§1.4)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from kvreg.fakes.faults import FaultPlan, FaultPlanError
from kvreg.fakes.mooncake import ErrorCode, FakeMooncake

INVALID = int(ErrorCode.INVALID_PARAMS)
MiB = 1 << 20

Mk = Callable[..., tuple[FakeMooncake, Any]]
Buf = Callable[..., Any]


def test_register_buffer_fault_on_a_middle_chunk(mk: Mk) -> None:
    # the FastDeploy chunk loop situation: chunk 2 of 3 fails with -600 (§1.4: the only code
    # register_buffer can return); the earlier chunk stays registered until rolled back
    fake, store = mk()
    pool = fake.virtual(3 * MiB, name="pool")
    fake.inject("register_buffer", nth=2, error="INVALID_PARAMS")
    codes = [store.register_buffer(pool.data_ptr() + i * MiB, MiB) for i in range(3)]
    assert codes == [0, INVALID, 0]
    assert fake.trace.calls("register_buffer")[1].injected
    assert "-> -600 INVALID_PARAMS [injected]" in fake.trace.format()
    assert len(fake.live_buffers()) == 2
    assert "pool + 0x200000" in fake.leak_report()
    fake.close_all()


def test_register_buffer_cannot_return_other_codes() -> None:
    # §1.4: any TE failure collapses into INVALID_PARAMS
    FakeMooncake()
    plan = FaultPlan()
    with pytest.raises(FaultPlanError, match="cannot return -800"):
        plan.arm("mooncake.register_buffer", error="TRANSFER_FAIL")
    with pytest.raises(FaultPlanError, match="unknown Mooncake ErrorCode name"):
        plan.arm("mooncake.put", error="TRANSFER_FAILED")
    plan.arm("mooncake.put", error=ErrorCode.TRANSFER_FAIL)       # enum members are ints


def test_unregister_fault(mk: Mk) -> None:
    fake, store = mk()
    pool = fake.virtual(MiB)
    store.register_buffer(pool.data_ptr(), MiB)
    fake.inject("unregister_buffer", nth=1)
    assert store.unregister_buffer(pool.data_ptr()) == INVALID
    assert store.registered_buffers() == [(pool.data_ptr(), MiB)]
    assert store.unregister_buffer(pool.data_ptr()) == 0


def test_put_and_get_faults_are_per_key(mk: Mk, buf: Buf) -> None:
    fake, store = mk()
    src, dst = buf(fake, 4 * 4096, fill=1), buf(fake, 4 * 4096)
    for x in (src, dst):
        store.register_buffer(x.ctypes.data, x.nbytes)
    keys = [f"k{i}" for i in range(4)]
    fake.inject("put", nth=3, error="TRANSFER_FAIL")
    assert store.batch_put_from(keys, [src.ctypes.data + i * 4096 for i in range(4)],
                                [4096] * 4) == [0, 0, -800, 0]
    assert store.batch_is_exist(keys) == [1, 1, 0, 1]
    fake.inject("get", nth=1, error="RPC_TIMEOUT")
    assert store.batch_get_into(keys, [dst.ctypes.data + i * 4096 for i in range(4)],
                                [4096] * 4) == [-901, 4096, -704, 4096]
    assert not dst[:4096].any() and np.array_equal(dst[4096:8192], src[4096:8192])
    fake.close_all()


def test_setup_is_exist_and_remove_faults(mk: Mk) -> None:
    fake = FakeMooncake(env={})
    fake.inject("setup", nth=1, error="RPC_FAIL")
    store = fake.store()
    assert store.setup("h", "P2PHANDSHAKE", MiB, MiB, "rdma", "", "m") == -900
    assert store.health_check() == 1 and fake.fabric.live_mrs() == []
    assert store.setup("h", "P2PHANDSHAKE", MiB, MiB, "rdma", "", "m") == 0
    store.put("k", b"abc")
    fake.inject("is_exist", nth=1, error="RPC_FAIL")
    assert store.batch_is_exist(["k", "k"]) == [-900, 1]
    fake.inject("remove", nth=1, error="OBJECT_HAS_LEASE")
    # the injected -706 first; then the real lease is_exist took (§7) needs force
    assert store.remove("k") == -706 and store.remove("k", force=True) == 0


def test_verbs_reg_mr_fault_reaches_the_store(mk: Mk) -> None:
    # one plan for the fabric and the store: an ibv_reg_mr failure on the second device makes
    # register_buffer return -600 with every MR rolled back (§1.5 step 3)
    fake, store = mk(devices={"mlx5_0": "mlx5", "mlx5_1": "mlx5"})
    pool = fake.virtual(MiB)
    before = len(fake.fabric.live_mrs())
    fake.fabric.inject("reg_mr", nth=2, error="ENOMEM")
    assert store.register_buffer(pool.data_ptr(), MiB) == INVALID
    assert len(fake.fabric.live_mrs()) == before
    assert store.client is not None and store.client.te.last_errno == 12
    assert store.register_buffer(pool.data_ptr(), MiB) == 0
    fake.close_all()


def test_raise_action_propagates(mk: Mk) -> None:
    fake, store = mk()
    fake.faults.arm("mooncake.put", raise_=RuntimeError("boom"), nth=1)
    with pytest.raises(RuntimeError, match="boom"):
        store.put("k", b"x")
    assert store.put("k", b"x") == 0
