"""The fake ``mooncake.engine.TransferEngine`` (docs/mooncake-verbs.md §8): the patch
contract, the binding's return codes, the version-switched behaviours, faults, the trace,
RDMA registrations on the fake fabric and the leak report. The same codes are held against
the real 0.3.13.post1 engine in tests/mooncake_real/test_engine_*.py.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any

import pytest

from kvreg.fakes.faults import FaultPlanError
from kvreg.fakes.mooncake import (
    ENGINE_BEFORE_V0_3_12,
    EngineCrash,
    FakeMooncake,
    TeError,
    TransferOpcode,
    get_store_profile,
)
from kvreg.fakes.mooncake.engine_core import EngineCore, RdmaTransport, Segment, TcpTransport
from kvreg.fakes.verbs.enums import ibv_access_flags as F
from kvreg.fakes.verbs.errors import NotModelledError

KiB = 1024
HOST = "10.77.0.1"
V013 = get_store_profile("v0.3.13")
LEGACY = V013.replace(**ENGINE_BEFORE_V0_3_12)
OVERLAPPED = int(TeError.ERR_ADDRESS_OVERLAPPED)
NOT_REGISTERED = int(TeError.ERR_ADDRESS_NOT_REGISTERED)


class Pair:
    """Two initialized fake engines over tcp and a 256 KiB buffer each."""

    def __init__(self, profile: Any = V013, **kw: Any) -> None:
        self.fake = FakeMooncake(profile, devices={}, env={}, **kw)
        self.a, self.b = self.fake.engine(), self.fake.engine()
        for engine in (self.a, self.b):
            assert engine.initialize(HOST, "P2PHANDSHAKE", "tcp", "") == 0
        self.abuf = ctypes.create_string_buffer(256 * KiB)
        self.bbuf = ctypes.create_string_buffer(256 * KiB)
        self.A, self.B = ctypes.addressof(self.abuf), ctypes.addressof(self.bbuf)
        self.sb = f"{HOST}:{self.b.get_rpc_port()}"


def test_the_patch_gives_the_fake_and_leaves_the_real_module_alone() -> None:
    before = sys.modules.get("mooncake.engine")
    fake = FakeMooncake(V013, devices={})
    with fake.patch():
        from mooncake.engine import TransferEngine, TransferOpcode

        engine = TransferEngine()
        assert engine.initialize(HOST, "P2PHANDSHAKE", "tcp", "") == 0
        assert engine in fake.engines
        assert TransferOpcode.Write == 1
        import mooncake

        assert mooncake.engine.TransferEngine is TransferEngine
    assert sys.modules.get("mooncake.engine") is before     # the real wheel, if imported
    engine.kvreg_destroy()


def test_the_issue_codes() -> None:
    # issue 28's list, each checked on the real 0.3.13.post1 engine (§8.2-§8.4)
    p = Pair()
    assert p.a.register_memory(p.A, 64 * KiB) == 0
    assert p.a.register_memory(p.A + 4 * KiB, 4 * KiB) == OVERLAPPED
    assert p.a.register_memory(p.A + 128 * KiB, 0) == int(TeError.ERR_INVALID_ARGUMENT)
    assert p.a.batch_register_memory([p.A + 192 * KiB] * 2, [4 * KiB] * 2) == OVERLAPPED
    assert p.a.transfer_sync_write(p.sb, p.A, p.B, 8) == -1
    assert p.a.unregister_memory(p.A) == 0
    assert p.a.unregister_memory(p.A) == NOT_REGISTERED
    assert p.fake.leak_report() == ""


def test_data_moves_between_engines_and_needs_one_remote_buffer() -> None:
    p = Pair()
    p.abuf[0:8] = b"ABCDEFGH"
    assert p.b.register_memory(p.B, 8 * KiB) == 0
    assert p.b.register_memory(p.B + 8 * KiB, 8 * KiB) == 0
    assert p.a.transfer_sync_write(p.sb, p.A, p.B + 100, 8) == 0        # tcp: local unchecked
    assert p.bbuf.raw[100:108] == b"ABCDEFGH"
    assert p.a.transfer_sync_write(p.sb, p.A, p.B + 8 * KiB - 4, 8) == -1   # straddles two
    assert p.a.batch_transfer_sync_read(p.sb, [p.A + 64], [p.B + 100], [8]) == 0
    assert p.abuf.raw[64:72] == b"ABCDEFGH"
    assert p.a.transfer_sync(p.sb, p.A, p.B + 200, 8, TransferOpcode.Write) == 0
    assert p.a.batch_transfer_sync_write(p.sb, [p.A], [p.B, p.B], [8]) == -1    # lengths
    assert p.a.transfer_sync_write(f"{HOST}:1", p.A, p.B, 8) == -1            # nobody there
    batch = p.a.batch_transfer_async_write(p.sb, [p.A], [p.B + 300], [8])
    assert batch != 0 and p.a.get_batch_transfer_status([batch]) == 0
    with pytest.raises(EngineCrash, match="not a live batch id"):
        p.a.get_batch_transfer_status([batch])                               # already spent
    assert p.a.batch_transfer_async_write(f"{HOST}:1", [p.A], [p.B], [8]) == 0
    sub = p.a.transfer_submit_write(p.sb, p.A, p.B + 64 * KiB, 8)
    assert p.a.transfer_check_status(sub) == -1


def test_a_batch_unregister_with_an_unknown_address_strands_the_others() -> None:
    # §8.3 (#2869, checked on the real engine): -3; the others leave the segment but stay
    # in the region map
    p = Pair()
    assert p.b.batch_register_memory([p.B, p.B + 8 * KiB], [4 * KiB, 4 * KiB]) == 0
    assert p.b.batch_unregister_memory([p.B, p.B + 64 * KiB, p.B + 8 * KiB]) == NOT_REGISTERED
    assert p.b.register_memory(p.B, 4 * KiB) == OVERLAPPED
    assert p.b.unregister_memory(p.B) == NOT_REGISTERED
    assert p.a.transfer_sync_write(p.sb, p.A, p.B, 8) == -1
    assert len(p.fake.live_engine_buffers()) == 2          # stranded: reported as leaks


@pytest.mark.parametrize(("profile", "expected"), [
    (V013, [-1, OVERLAPPED, NOT_REGISTERED, 0]),
    (LEGACY, [0, 0, 0, 0]),
])
def test_batch_behaviour_before_and_after_v0_3_12(profile: Any, expected: list[int]) -> None:
    # #2854: zero-length and duplicate entries refused; #2869: an unknown address is -3.
    # Before v0.3.12 all were 0, and a batch unregister forgot every address it named.
    p = Pair(profile)
    got = [p.a.batch_register_memory([p.A, p.A + 8 * KiB], [4 * KiB, 0]),
           p.a.batch_register_memory([p.A + 16 * KiB] * 2, [4 * KiB] * 2),
           p.a.batch_unregister_memory([p.A + 16 * KiB, p.A + 200 * KiB]),
           p.a.register_memory(p.A + 16 * KiB, 4 * KiB)]
    assert got == expected


def _two_transport_core(profile: Any) -> tuple[FakeMooncake, EngineCore, Segment]:
    fake = FakeMooncake(profile)                        # one mlx5 NIC on node0
    segment = Segment("node0:15000")
    nics = list(fake.node().nics.values())
    access = int(F.IBV_ACCESS_LOCAL_WRITE | F.IBV_ACCESS_REMOTE_WRITE)
    core = EngineCore(profile, [TcpTransport(segment), RdmaTransport(segment, nics, access)])
    return fake, core, segment


@pytest.mark.parametrize(("profile", "published"), [(V013, 0), (LEGACY, 1)])
def test_a_failure_on_the_second_transport_is_rolled_back(profile: Any,
                                                          published: int) -> None:
    # #2965: the tcp registration is undone when RDMA's ibv_reg_mr fails (-202 ERR_CONTEXT);
    # before v0.3.12 the buffer stayed published on tcp though register returned an error
    fake, core, segment = _two_transport_core(profile)
    buf = ctypes.create_string_buffer(8 * KiB)
    fake.fabric.inject("reg_mr", nth=1, error="ENOMEM")
    assert core.register(ctypes.addressof(buf), 8 * KiB) == int(TeError.ERR_CONTEXT)
    assert len(segment.buffers) == published
    assert core.regions == {}
    assert fake.fabric.live_mrs() == []


def test_legacy_rdma_batch_drops_a_failed_buffer_and_returns_success() -> None:
    # #2869: before it, RDMA logged a warning per failed buffer and the batch returned 0
    bufs = [ctypes.create_string_buffer(8 * KiB) for _ in range(3)]
    addrs = [ctypes.addressof(b) for b in bufs]
    results = []
    for profile in (V013, LEGACY):
        fake = FakeMooncake(profile)
        engine = fake.engine()
        assert engine.initialize(HOST, "P2PHANDSHAKE", "rdma", "") == 0
        assert engine.state is not None and engine.state.protocol == "rdma"
        fake.fabric.inject("reg_mr", nth=2, error="EFAULT")
        results.append((engine.batch_register_memory(addrs, [8 * KiB] * 3),
                        len(fake.fabric.live_mrs()), len(engine.registered_buffers())))
        engine.kvreg_destroy()
    assert results == [(int(TeError.ERR_CONTEXT), 0, 0), (0, 2, 3)]


def test_rdma_transfers_need_the_local_range_registered_too() -> None:
    fake = FakeMooncake(V013, node="prefill")
    fake.fabric.add_node("decode")
    fake.fabric.add_device("mlx5_1", "mlx5", node="decode")
    a, b = fake.engine("prefill"), fake.engine("decode")
    for engine in (a, b):
        assert engine.initialize(HOST, "P2PHANDSHAKE", "rdma", "") == 0
    src, dst = ctypes.create_string_buffer(4 * KiB), ctypes.create_string_buffer(4 * KiB)
    src[0:4] = b"kv!!"
    seg = f"{HOST}:{b.get_rpc_port()}"
    assert b.register_memory(ctypes.addressof(dst), 4 * KiB) == 0
    assert a.transfer_sync_write(seg, ctypes.addressof(src), ctypes.addressof(dst), 4) == -1
    assert a.register_memory(ctypes.addressof(src), 4 * KiB) == 0
    assert a.transfer_sync_write(seg, ctypes.addressof(src), ctypes.addressof(dst), 4) == 0
    assert dst.raw[:4] == b"kv!!"
    assert {(m.device, m.owner) for m in fake.fabric.live_mrs()} == {
        ("mlx5_0", "mooncake.engine"), ("mlx5_1", "mooncake.engine")}
    fake.close_all()
    assert fake.fabric.live_mrs() == [] and fake.leak_report() == ""


def test_mc_force_tcp_keeps_the_nics_out() -> None:
    fake = FakeMooncake(V013, env={"MC_FORCE_TCP": "1"})
    engine = fake.engine()
    assert engine.initialize(HOST, "P2PHANDSHAKE", "rdma", "") == 0
    assert engine.state is not None and engine.state.protocol == "tcp"


def test_faults_use_the_engine_codes_and_show_in_the_trace() -> None:
    p = Pair()
    p.fake.inject("mooncake.engine.register_memory", nth=1, error="ERR_ADDRESS_OVERLAPPED")
    assert p.a.register_memory(p.A, 4 * KiB) == OVERLAPPED
    assert p.a.register_memory(p.A, 4 * KiB) == 0
    entry = p.fake.trace.calls("register_memory")[0]
    assert entry.injected and entry.code == OVERLAPPED
    assert "ERR_ADDRESS_OVERLAPPED [injected]" in p.fake.trace.format()
    p.fake.inject("mooncake.engine.transfer_sync_write", nth=1, error=-1)
    assert p.b.register_memory(p.B, 4 * KiB) == 0
    assert p.a.transfer_sync_write(p.sb, p.A, p.B, 8) == -1
    with pytest.raises(FaultPlanError, match="cannot return -3"):
        p.fake.inject("mooncake.engine.register_memory", error=NOT_REGISTERED)
    with pytest.raises(FaultPlanError, match="unknown Mooncake transfer-engine code name"):
        p.fake.inject("mooncake.engine.unregister_memory", error="ERR_NOPE")


def test_before_initialize_the_fake_crashes_loudly() -> None:
    engine = FakeMooncake(V013).engine()
    with pytest.raises(EngineCrash, match=r"register_memory\(\) before initialize"):
        engine.register_memory(0x1000, 4096)
    assert engine.send_probe("x:1") == -1
    quiet = FakeMooncake(V013.replace(engine_crashes_before_initialize=False)).engine()
    with pytest.raises(RuntimeError, match="before initialize"):
        quiet.get_rpc_port()
    with pytest.raises(NotModelledError, match="get_local_topology"):
        engine.get_local_topology()


def test_reinitialize_drops_the_old_engine() -> None:
    p = Pair()
    old = p.sb
    assert p.b.register_memory(p.B, 4 * KiB) == 0
    assert p.b.initialize(HOST, "P2PHANDSHAKE", "tcp", "") == 0
    assert p.b.registered_buffers() == [] and old not in p.fake.engine_segments
    assert p.a.transfer_sync_write(old, p.A, p.B, 8) == -1
    assert p.b.initialize(HOST, "P2PHANDSHAKE", "xgmi", "") == -1


def test_managed_buffers_are_registered_slabs() -> None:
    p = Pair()
    m1 = p.a.allocate_managed_buffer(4 * KiB)
    m2 = p.a.allocate_managed_buffer(4 * KiB)
    assert m2 - m1 == -8 * KiB                       # buddy halves, last pushed first
    assert p.a.register_memory(m1, 4 * KiB) == OVERLAPPED   # inside the 2 GiB slab
    assert p.a.free_managed_buffer(m1, 4 * KiB) == 0
    assert p.a.allocate_managed_buffer(4 * KiB) == m1
    big = p.a.allocate_managed_buffer(300 << 20)     # above 256 MiB: a buffer of its own
    assert (big, 300 << 20) in p.a.registered_buffers()
    assert p.a.free_managed_buffer(big, 300 << 20) == 0
    assert (big, 300 << 20) not in p.a.registered_buffers()


# the real binding's names the fake leaves out on purpose (docs/mooncake-verbs.md §8.7)
MODULE_NOT_MODELLED = {"CoroRPCInterface", "InnerTransferEngine", "ReceivedData",
                       "ReceivedTensor", "RpcInterface", "SharedSegment", "create_rpc_client",
                       "create_rpc_server"}


def test_every_real_name_exists_on_the_fake() -> None:
    real = pytest.importorskip("mooncake.engine", reason="the Mooncake wheel is not installed "
                               "(bash .ci/mooncake-real PYTHON install): nothing to compare")
    fake = FakeMooncake(V013)
    module = fake.modules()["mooncake.engine"]
    public = {n for n in dir(real) if not n.startswith("_")}
    assert public - set(vars(module)) == MODULE_NOT_MODELLED
    engine = fake.engine()
    methods = {n for n in dir(real.TransferEngine) if not n.startswith("_")}
    assert {n for n in methods if not hasattr(engine, n)} == set()
    for name in ("SUPPORT_CUDA", "SUPPORT_EFA"):
        assert getattr(module, name) is getattr(real, name) is False
    assert int(module.Write) == int(real.Write) and int(module.Read) == int(real.Read)
