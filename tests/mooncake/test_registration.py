"""register_buffer -> MRs per device, size limits by version (docs/mooncake-verbs.md §1.5, §1.6)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kvreg.fakes.mooncake import ErrorCode, FakeMooncake, get_store_profile
from kvreg.fakes.verbs.enums import ibv_access_flags as A

INVALID = int(ErrorCode.INVALID_PARAMS)
MiB, GiB, TiB = 1 << 20, 1 << 30, 1 << 40
TWO_NICS = {"mlx5_0": "mlx5", "mlx5_1": "mlx5"}

Mk = Callable[..., tuple[FakeMooncake, Any]]


def _user_mrs(fake: FakeMooncake, base: int, size: int) -> list[tuple[str, int, int]]:
    return sorted((m.device, m.addr - base, m.length) for m in fake.fabric.live_mrs()
                  if base <= m.addr < base + size)


def test_one_mr_per_device_per_buffer(mk: Mk) -> None:
    # §1.5 step 4: every RDMA device gets its own MR of the buffer
    fake, store = mk(devices=TWO_NICS)
    pool = fake.virtual(8 * MiB, name="pool")
    assert store.register_buffer(pool.data_ptr(), 8 * MiB) == 0
    assert _user_mrs(fake, pool.data_ptr(), 8 * MiB) == [("mlx5_0", 0, 8 * MiB),
                                                          ("mlx5_1", 0, 8 * MiB)]
    assert "register_buffer" in fake.trace.format()
    assert store.registered_buffers() == [(pool.data_ptr(), 8 * MiB)]
    assert store.unregister_buffer(pool.data_ptr()) == 0
    assert _user_mrs(fake, pool.data_ptr(), 8 * MiB) == []


def test_rdma_devices_selects_nics(mk: Mk) -> None:
    fake, store = mk(devices=TWO_NICS, rdma_devices="mlx5_1")
    pool = fake.virtual(MiB)
    store.register_buffer(pool.data_ptr(), MiB)
    assert [d for d, _, _ in _user_mrs(fake, pool.data_ptr(), MiB)] == ["mlx5_1"]
    fake.close_all()


def test_null_zero_overlap_and_adjacent(mk: Mk) -> None:
    # §1.5: null -> -600, len 0 -> -600, overlap (ERR_ADDRESS_OVERLAPPED) -> -600,
    # adjacent non-overlapping chunks are fine
    fake, store = mk()
    pool = fake.virtual(4 * MiB)
    p = pool.data_ptr()
    assert store.register_buffer(0, MiB) == INVALID
    assert store.register_buffer(p, 0) == INVALID
    assert store.register_buffer(p, 2 * MiB) == 0
    assert store.register_buffer(p + MiB, 2 * MiB) == INVALID
    assert store.register_buffer(p, MiB) == INVALID
    assert store.register_buffer(p + 2 * MiB, 2 * MiB) == 0          # adjacent
    assert len(_user_mrs(fake, p, 4 * MiB)) == 2
    fake.close_all()


def test_unregister_needs_the_exact_base(mk: Mk) -> None:
    # §1.5 step 5: an interior pointer -> ERR_ADDRESS_NOT_REGISTERED -> -600; twice -> -600
    fake, store = mk()
    pool = fake.virtual(2 * MiB)
    store.register_buffer(pool.data_ptr(), 2 * MiB)
    assert store.unregister_buffer(pool.data_ptr() + 4096) == INVALID
    assert len(_user_mrs(fake, pool.data_ptr(), 2 * MiB)) == 1
    assert store.unregister_buffer(pool.data_ptr()) == 0
    assert store.unregister_buffer(pool.data_ptr()) == INVALID


@pytest.mark.parametrize("protocol", ["rdma", "tcp"])
def test_released_rejects_a_buffer_above_the_limit_for_every_protocol(
        mk: Mk, protocol: str) -> None:
    # §1.6 released: CheckRegisterMemoryParams rejects len > max_mr_size with -600 for every
    # protocol (tcp included) and registers nothing
    fake, store = mk(protocol=protocol, env={"MC_MAX_MR_SIZE": str(4 * MiB)})
    pool = fake.virtual(16 * MiB)
    assert store.register_buffer(pool.data_ptr(), 4 * MiB + 1) == INVALID
    assert _user_mrs(fake, pool.data_ptr(), 16 * MiB) == []
    assert store.registered_buffers() == []
    assert store.register_buffer(pool.data_ptr(), 4 * MiB) == 0      # at the limit: fine
    fake.close_all()


def test_effective_limit_is_min_of_env_and_devices(mk: Mk) -> None:
    # §1.6: min(1 TiB or MC_MAX_MR_SIZE, every opened device's max_mr_size)
    _fake, store = mk(devices={"mlx5_0": "mlx5", "ionic_0": "ionic"})
    assert store.client.max_mr_size == 2 * GiB                        # ionic advertises 2 GiB
    _, plain = mk()
    assert plain.client.max_mr_size == TiB                            # 0x10000000000
    _, env = mk(env={"MC_MAX_MR_SIZE": "4294967296"})
    assert env.client.max_mr_size == 4 * GiB
    _, garbage = mk(env={"MC_MAX_MR_SIZE": "lots"})                   # atoll -> 0: ignored
    assert garbage.client.max_mr_size == TiB
    _, atoll = mk(env={"MC_MAX_MR_SIZE": "1048576bytes"})             # atoll reads the digits
    assert atoll.client.max_mr_size == MiB
    _, tcp = mk(protocol="tcp", devices={"ionic_0": "ionic"})         # tcp opens no device
    assert tcp.client.max_mr_size == TiB


def test_v0_3_10_ignores_mc_max_mr_size() -> None:
    # §1.6: MC_MAX_MR_SIZE is absent in v0.3.10 and earlier
    old = get_store_profile("released").replace(reads_mc_max_mr_size=False)
    fake = FakeMooncake(old, env={"MC_MAX_MR_SIZE": str(MiB)})
    store = fake.store()
    assert store.setup("h", "P2PHANDSHAKE", MiB, MiB, "rdma", "", "m") == 0
    assert store.client.max_mr_size == TiB


def test_released_checks_local_buffer_size_and_splits_the_segment(mk: Mk) -> None:
    # §1.6: setup's local_buffer_size goes through the size check; global_segment_size is
    # split into <= max_mr_size segments by setup itself
    fake = FakeMooncake(env={"MC_MAX_MR_SIZE": str(MiB)})
    assert fake.store().setup("h", "P2PHANDSHAKE", MiB, 2 * MiB, "rdma", "", "m") == INVALID
    assert fake.fabric.live_mrs() == []
    fake2, _store = mk(env={"MC_MAX_MR_SIZE": str(MiB)}, gseg=3 * MiB + 5, lbuf=MiB)
    seg = sorted(m.length for m in fake2.fabric.live_mrs())
    assert seg == [5, MiB, MiB, MiB, MiB]     # 3 MiB + 5 of segment in 4 pieces, + local buffer


def test_head_splits_big_buffers_into_mrs_per_device(mk: Mk) -> None:
    # §1.6 HEAD (#2644): no store limit for rdma; <= max_mr_size chunks, each an MR on every
    # device; unregister(base) frees all chunks
    fake, store = mk("head", devices=TWO_NICS, env={"MC_MAX_MR_SIZE": str(4 * MiB)})
    pool = fake.virtual(10 * MiB)
    p = pool.data_ptr()
    assert store.register_buffer(p, 10 * MiB) == 0
    assert _user_mrs(fake, p, 10 * MiB) == sorted(
        (d, off, n) for d in TWO_NICS for off, n in ((0, 4 * MiB), (4 * MiB, 4 * MiB),
                                                      (8 * MiB, 2 * MiB)))
    assert store.unregister_buffer(p + 4 * MiB) == INVALID          # a chunk is not a base
    assert store.unregister_buffer(p) == 0
    assert _user_mrs(fake, p, 10 * MiB) == []


def test_head_keeps_the_limit_for_efa(mk: Mk) -> None:
    # §1.6 HEAD (#3486): max_mr_size still applies to efa (and cxi)
    fake, store = mk("head", protocol="efa", devices={"efa_0": "efa"},
                     env={"MC_MAX_MR_SIZE": str(4 * MiB)})
    pool = fake.virtual(16 * MiB)
    assert store.register_buffer(pool.data_ptr(), 8 * MiB) == INVALID
    fake.close_all()


def test_access_flags_by_version(mk: Mk) -> None:
    # §1.5: released registers LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ; HEAD LOCAL_WRITE (+RO)
    for profile, want in (("released", int(A.IBV_ACCESS_LOCAL_WRITE |
                                           A.IBV_ACCESS_REMOTE_WRITE |
                                           A.IBV_ACCESS_REMOTE_READ)),
                          ("head", int(A.IBV_ACCESS_LOCAL_WRITE |
                                       A.IBV_ACCESS_RELAXED_ORDERING))):
        fake, store = mk(profile)
        pool = fake.virtual(MiB)
        store.register_buffer(pool.data_ptr(), MiB)
        (mr,) = [m for m in fake.fabric.live_mrs() if m.addr == pool.data_ptr()]
        assert mr.access == want, profile
        fake.close_all()


def test_memlock_failure_on_the_second_device_rolls_back(mk: Mk) -> None:
    # §1.5 step 3-4 and §1.9: N devices x bytes must fit ulimit -l (ENOMEM); the TE rolls
    # back the MRs it made; the store returns -600 and nothing stays registered
    fake, store = mk(devices=TWO_NICS, gseg=0, lbuf=0)
    fake.node().memlock_limit = 12 * MiB
    pool = fake.virtual(16 * MiB)
    assert store.register_buffer(pool.data_ptr(), 8 * MiB) == INVALID
    assert fake.fabric.live_mrs() == [] and fake.node().pinned_bytes == 0
    assert [e.code for e in fake.trace.calls("reg_mr")] == [0, 12]
    assert store.register_buffer(pool.data_ptr(), 6 * MiB) == 0      # 2 x 6 MiB fits
    fake.close_all()


def test_device_max_mr_size_clamps_the_released_store(mk: Mk) -> None:
    # §1.6 + §5.2: an erdma NIC (64 GiB, enforced) lowers the store's limit; above it -600
    fake, store = mk(devices={"erdma_0": "erdma"})
    pool = fake.virtual(128 * GiB)
    assert store.register_buffer(pool.data_ptr(), 64 * GiB + 4096) == INVALID
    assert store.register_buffer(pool.data_ptr(), 64 * GiB) == 0
    fake.close_all()


def test_released_engine_silently_shrinks_an_oversized_mr() -> None:
    # §1.6 TE level, released: a too-long registration is shrunk to max_mr_size while the
    # buffer is advertised whole; a transfer past the MR fails (issue #2017). Only reachable
    # through the engine itself: the released store rejects the buffer first.
    from kvreg.fakes.mooncake import FakeTransferEngine

    fake = FakeMooncake(env={})
    node = fake.node()
    te = FakeTransferEngine(node, list(node.nics.values()), get_store_profile("released"),
                            max_mr_size=MiB, slice_size=65536)
    pool = node.virtual(4 * MiB)
    assert te.register(pool.data_ptr(), 4 * MiB, int(A.IBV_ACCESS_LOCAL_WRITE)) == 0
    (reg,) = te.registrations()
    assert reg.chunks[0].length == 4 * MiB and reg.chunks[0].mrs[0].length == MiB
    assert te.transfer_ok(pool.data_ptr(), 65536)
    assert not te.transfer_ok(pool.data_ptr() + 2 * MiB, 65536)
    assert te.unregister(pool.data_ptr()) == 0 and fake.fabric.live_mrs() == []


def test_close_releases_the_segments_address_space(mk: Mk) -> None:
    fake, store = mk()
    names = [a.name for a in fake.node().space.allocations()]
    assert any(n.startswith("mooncake-segment@") for n in names)
    assert store.close() == 0
    assert not any(a.name.startswith("mooncake-") for a in fake.node().space.allocations())
