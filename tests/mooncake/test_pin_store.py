"""What the fake store returns and records at edges only a wrong fake would change
(fakes/mooncake/session.py). Each was a surviving mutant (docs/mutation-testing.md); the
behaviour is the real store's as docs/mooncake-verbs.md gives it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from kvreg.fakes.mooncake import FakeMooncake, get_store_profile
from kvreg.fakes.verbs.enums import ibv_access_flags as A

MiB = 1 << 20
INVALID = -600

Mk = Callable[..., tuple[FakeMooncake, Any]]
Buf = Callable[..., Any]


def test_a_dummy_clients_refusal_is_a_negative_code() -> None:
    # §7: a dummy client (setup_dummy, memory served by a standalone mooncake_client) refuses
    # process memory outside its shared memory with -1; code that checks `rc < 0` (as
    # Mooncake's own callers do) must see a failure, never a positive count
    fake = FakeMooncake()
    store = fake.store()
    assert store.setup_dummy(0, 0, "localhost:50052") == 0
    pool = fake.virtual(MiB, name="pool")
    assert store.register_buffer(pool.data_ptr(), MiB) == -1
    (call,) = fake.trace.calls("register_buffer")
    assert call.code == -1 and not call.injected
    assert fake.live_buffers() == []
    fake.close_all()


def test_an_injected_setup_fault_is_recorded_as_injected() -> None:
    # the checks excuse what a fault plan did and judge what the store did on its own
    fake = FakeMooncake()
    store = fake.store()
    fake.inject("setup", nth=1, error="INVALID_PARAMS")
    assert store.setup("h", "P2PHANDSHAKE", MiB, MiB, "rdma", "", "m") == INVALID
    assert store.setup("h", "P2PHANDSHAKE", MiB, MiB, "rdma", "", "m") == 0
    first, second = fake.trace.calls("setup")
    assert (first.code, first.injected) == (INVALID, True)
    assert (second.code, second.injected) == (0, False)
    assert "-> -600 INVALID_PARAMS [injected]" in fake.trace.format()
    fake.close_all()


def test_a_genuine_setup_failure_is_not_injected() -> None:
    fake = FakeMooncake()
    store = fake.store()
    assert store.setup("h", "P2PHANDSHAKE", MiB, MiB, "carrier-pigeon", "", "m") == INVALID
    (call,) = fake.trace.calls("setup")
    assert (call.code, call.injected) == (INVALID, False)


def test_only_the_global_segment_is_published_for_remote_access(mk: Mk, buf: Buf) -> None:
    # §1.6: setup registers the global segment with remote read/write (other nodes' stores
    # put objects into it) and publishes it; a user's register_buffer is not published
    fake, store = mk(gseg=4 * MiB, lbuf=MiB)
    user = buf(fake, 64 * 1024)
    assert store.register_buffer(user.ctypes.data, user.nbytes) == 0
    (session,) = fake.stores
    regs = {r.length: r.remote_accessible for r in session.client.te.registrations()}
    assert regs[4 * MiB] is True and regs[64 * 1024] is False
    fake.close_all()


def test_a_multi_buffer_get_is_traced_with_its_first_buffer(mk: Mk, buf: Buf) -> None:
    fake, store = mk()
    src, dst = buf(fake, 16384, fill=3), buf(fake, 16384)
    for x in (src, dst):
        store.register_buffer(x.ctypes.data, x.nbytes)
    s, d = src.ctypes.data, dst.ctypes.data
    assert store.batch_put_from_multi_buffers(["k"], [[s, s + 8192]], [[4096, 4096]]) == [0]
    assert store.batch_get_into_multi_buffers(["k"], [[d + 4096, d + 12288]],
                                              [[4096, 4096]]) == [8192]
    (get,) = fake.trace.calls("batch_get_into_multi_buffers")
    assert get.args == ("k", d + 4096, 4096)
    fake.close_all()


LEASED, NOT_FOUND, NO_HANDLE = -706, -704, -200


def _clocked(profile: Any = "v0.3.13") -> tuple[FakeMooncake, list[float]]:
    """A fake whose master clock (seconds) the test advances by hand."""
    fake = FakeMooncake(profile, env={})
    now = [0.0]
    fake.cluster("master:50051").clock = lambda: now[0]
    return fake, now


def _setup(fake: FakeMooncake, gseg: int = 4 * MiB) -> Any:
    store = fake.store()
    assert store.setup("host0", "P2PHANDSHAKE", gseg, MiB, "tcp", "", "master:50051") == 0
    return store


@pytest.mark.parametrize("ttl_ms", [10000, 300])
def test_a_reads_lease_lasts_default_kv_lease_ttl_milliseconds(ttl_ms: int) -> None:
    # the master's --default_kv_lease_ttl is in milliseconds (Mooncake
    # mooncake-store/include/types.h: DEFAULT_DEFAULT_KV_LEASE_TTL "// in milliseconds";
    # master.cpp's flag default 10000, docs/mooncake-verbs.md §7.3); a remove is refused with
    # -706 OBJECT_HAS_LEASE until it runs out, then succeeds. [verified] on 0.3.13.post1 with a
    # 300 ms master: tests/mooncake_real/test_semantics.py::
    # test_the_lease_ends_after_default_kv_lease_ttl
    fake, now = _clocked(get_store_profile("v0.3.13").replace(default_kv_lease_ttl_ms=ttl_ms))
    store = _setup(fake)
    assert store.put("k", b"abcdefghij") == 0
    assert store.get("k") == b"abcdefghij"          # the read takes the lease
    now[0] = 0.9 * ttl_ms / 1000
    assert store.remove("k") == LEASED
    now[0] = 1.1 * ttl_ms / 1000
    assert store.remove("k") == 0
    assert store.get_size("k") == NOT_FOUND
    fake.close_all()


def test_objects_live_in_mounted_segments() -> None:
    # a put with no global segment mounted anywhere finds no space: -200 NO_AVAILABLE_HANDLE
    # (Mooncake types.h: "Memory allocation failed due to insufficient space", the master's
    # PUT_NO_SPACE_HELPER_STR "... or mounting more segments"); an object lives in the
    # segment that took it and goes when that client closes (§7.2). [verified] on 0.3.13.post1:
    # tests/mooncake_real/test_semantics.py::test_objects_live_in_segments (same steps, same
    # results)
    fake, _ = _clocked()
    lone = _setup(fake, gseg=0)
    a = np.arange(4096, dtype=np.uint8)
    out = [lone.put_from("k", a.ctypes.data, 10)]
    holder = _setup(fake)
    out += [lone.put_from("k", a.ctypes.data, 10), lone.get_size("k"), holder.close(),
            lone.get_size("k"), lone.put("k2", b"x"), lone.close()]
    assert out == [NO_HANDLE, 0, 10, 0, NOT_FOUND, NO_HANDLE, 0]


def test_without_segment_placement_a_put_always_finds_space() -> None:
    # the profile option off (objects_live_in_segments=False, a deployment modelled without
    # segments): no -200, and a close drops nothing
    fake, _ = _clocked(get_store_profile("v0.3.13").replace(objects_live_in_segments=False))
    lone = _setup(fake, gseg=0)
    holder = _setup(fake)
    assert lone.put("k", b"xyz") == 0 and holder.put("h", b"ab") == 0
    assert holder.close() == 0
    assert (lone.get_size("k"), lone.get_size("h")) == (3, 2)
    fake.close_all()


def test_a_dummy_client_refuses_process_memory_and_keeps_bytes_puts() -> None:
    # §7.5: a setup_dummy client is served by a standalone mooncake_client through shared
    # memory: register_buffer of process memory -1 (Mooncake dummy_client.cpp
    # DummyClient::register_buffer: "Buffer is not in any registered shared memory", return
    # -1), put_from/get_into -600, while put/get of bytes go through the RPC
    # (DummyClient::put -> RealClient::put_dummy_helper) and work. [verified] on
    # 0.3.13.post1: tests/mooncake_real/test_semantics.py::
    # test_a_dummy_client_refuses_process_memory (same steps, same results)
    fake, _ = _clocked()
    s = fake.store()
    a, b = np.arange(4096, dtype=np.uint8), np.zeros(4096, np.uint8)
    out = [s.setup_dummy(16 * MiB, 16 * MiB, "127.0.0.1:50052"),
           s.register_buffer(a.ctypes.data, 4096), s.put_from("k", a.ctypes.data, 10),
           s.put("k2", b"abc"), s.get("k2"), s.get_into("k2", b.ctypes.data, 10),
           s.remove("k2"), s.close()]
    assert out == [0, -1, INVALID, 0, b"abc", INVALID, LEASED, 0]


def test_a_batch_entry_of_size_0_is_refused_in_both_put_batches(mk: Mk, buf: Buf) -> None:
    # §7.4: put_from of size 0 returns 0 (a warning), but an entry of size 0 in a batch put is
    # -600 INVALID_PARAMS, in batch_put_from and batch_put_from_multi_buffers alike, while the
    # other entries are stored (docs/mooncake-verbs.md §7.4, checked on 0.3.13.post1 by the
    # differential tier, tests/mooncake_real/test_differential.py)
    fake, store = mk()
    src = buf(fake, 8192, fill=5)
    assert store.register_buffer(src.ctypes.data, src.nbytes) == 0
    p = src.ctypes.data
    assert store.batch_put_from(["a", "z"], [p, p + 4096], [4096, 0]) == [0, INVALID]
    assert store.batch_put_from_multi_buffers(["m", "e"], [[p, p + 4096], [p]],
                                              [[4096, 4096], [0]]) == [0, INVALID]
    assert [store.get_size(k) for k in ("a", "z", "m", "e")] == [4096, -704, 8192, -704]
    fake.close_all()


@pytest.mark.parametrize("profile", ["released", "v0.3.13", "head"])
def test_a_global_segment_size_of_0_mounts_no_segment(profile: str) -> None:
    # global_segment_size 0 is a client that mounts no segment (Mooncake's store setup,
    # mooncake-integration/store/store_py.cpp: "Skip mount segment if global_segment_size is
    # 0", after registering the local buffer); [verified] on 0.3.13.post1 as a store that gets -200
    # from a put when no other segment exists: tests/mooncake_real/test_semantics.py::
    # test_objects_live_in_segments): setup returns 0 and reserves no segment memory
    fake = FakeMooncake(profile, env={})
    store = fake.store()
    assert store.setup("host0", "P2PHANDSHAKE", 0, MiB, "tcp", "", "master:50051") == 0
    names = [a.name for a in fake.node().space.allocations()]
    assert names == ["mooncake-local-buffer@host0"]
    fake.close_all()


@pytest.mark.parametrize("profile", ["released", "head"])
def test_the_global_segment_is_registered_for_remote_read_and_write(profile: str) -> None:
    # other nodes' stores write objects into this segment and read them back, so setup
    # registers it with LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ (Mooncake
    # mooncake-transfer-engine/src/transport/rdma_transport/rdma_transport.cpp
    # registerLocalMemory's access rights; docs/mooncake-verbs.md §1.5), on HEAD too, where a
    # user buffer gets LOCAL_WRITE only
    fake = FakeMooncake(profile, env={})
    store = fake.store()
    assert store.setup("host0", "P2PHANDSHAKE", 4 * MiB, 0, "rdma", "", "master:50051") == 0
    (seg,) = [a for a in fake.node().space.allocations()
              if a.name.startswith("mooncake-segment@")]
    mrs = [m for m in fake.fabric.live_mrs() if seg.base <= m.addr < seg.base + seg.size]
    remote = int(A.IBV_ACCESS_LOCAL_WRITE | A.IBV_ACCESS_REMOTE_WRITE | A.IBV_ACCESS_REMOTE_READ)
    assert mrs and all(m.access & remote == remote for m in mrs)
    fake.close_all()


def test_setup_from_a_dict_defaults_both_sizes_to_16_mib() -> None:
    # the dict overload's defaults: global_segment_size and local_buffer_size 16 MiB (Mooncake
    # mooncake-store/include/types.h DEFAULT_GLOBAL_SEGMENT_SIZE and DEFAULT_LOCAL_BUFFER_SIZE,
    # "1024 * 1024 * 16; // 16MB"; docs/mooncake-verbs.md §1.2)
    fake = FakeMooncake("v0.3.13", env={})
    store = fake.store()
    assert store.setup({"local_hostname": "h", "metadata_server": "P2PHANDSHAKE",
                        "protocol": "tcp"}) == 0
    sizes = {a.name: a.size for a in fake.node().space.allocations()}
    assert sizes == {"mooncake-segment@h": 16 * MiB, "mooncake-local-buffer@h": 16 * MiB}
    fake.close_all()


def test_a_failed_setup_dummy_mounts_no_standalone_segment() -> None:
    # a dummy client whose connect to the standalone mooncake_client fails gets -1 from
    # setup_dummy (Mooncake dummy_client.cpp DummyClient::setup_dummy: "Failed to connect to
    # real client", return -1): no standalone client is there, so no segment is mounted and a
    # put still finds none (-200), here on a store already set up without a segment
    fake = FakeMooncake("v0.3.13", env={})
    store = fake.store()
    assert store.setup("h", "P2PHANDSHAKE", 0, MiB, "tcp", "", "127.0.0.1:50051") == 0
    fake.inject("setup", nth=1, error=-1)
    assert store.setup_dummy(16 * MiB, 16 * MiB, "127.0.0.1:50051") == -1
    assert store.put("k", b"abc") == NO_HANDLE
    fake.close_all()


def test_an_injected_is_exist_fault_is_recorded_as_injected(mk: Mk) -> None:
    # as for setup: the checks excuse what a fault plan did, so the trace marks it
    fake, store = mk()
    fake.inject("is_exist", nth=1, error="RPC_FAIL")
    assert store.is_exist("k") == -900
    assert store.is_exist("k") == 0
    (call,) = fake.trace.calls("is_exist")        # an answered is_exist is not traced
    assert (call.code, call.injected) == (-900, True)
    assert "-> -900 RPC_FAIL [injected]" in fake.trace.format()
    fake.close_all()
