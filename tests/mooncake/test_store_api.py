"""The store's Python API: return conventions and semantics (docs/mooncake-verbs.md §1.1-§1.3)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from kvreg.fakes.mooncake import (
    ErrorCode,
    FakeMooncake,
    ReplicateConfig,
    StoreCrash,
    get_store_profile,
)
from kvreg.fakes.verbs import NotModelledError

INVALID = int(ErrorCode.INVALID_PARAMS)
HAS_LEASE = int(ErrorCode.OBJECT_HAS_LEASE)
NOT_FOUND = int(ErrorCode.OBJECT_NOT_FOUND)
TRANSFER_FAIL = int(ErrorCode.TRANSFER_FAIL)
MiB = 1 << 20

Mk = Callable[..., tuple[FakeMooncake, Any]]
Buf = Callable[..., Any]


CRASHING_CALLS: list[tuple[str, tuple[Any, ...]]] = [
    ("register_buffer", (0x1000, 4096)), ("unregister_buffer", (0x1000,)),
    ("get_into", ("k", 0x1000, 10)), ("put", ("k", b"x")),
    ("batch_put_from", (["a", "b"], [1, 2], [3, 4])), ("batch_get_into", (["a"], [1], [3])),
    ("batch_get_into_multi_buffers", (["a"], [[1]], [[3]])), ("is_exist", ("k",)),
    ("batch_is_exist", (["k"],)), ("get_size", ("k",)), ("remove", ("k",)),
    ("batch_remove", (["k"],)), ("remove_all", ()), ("remove_by_regex", ("k",))]


@pytest.mark.parametrize(("api", "args"), CRASHING_CALLS)
def test_before_setup_and_after_close_a_crashing_call_raises(api: str, args: tuple[Any, ...]
                                                            ) -> None:
    # §7: each of these segfaults the real 0.3.13.post1 process before setup() and after
    # close() (tests/mooncake_real/test_crashes.py runs them in child processes); the fake
    # must not make it look handled
    fake = FakeMooncake()
    store = fake.store()
    with pytest.raises(StoreCrash, match=f"{api}.*segfaults"):
        getattr(store, api)(*args)
    assert store.setup("h", "P2PHANDSHAKE", MiB, MiB, "tcp", "", "m") == 0
    assert store.close() == 0
    with pytest.raises(StoreCrash, match="SIGSEGV"):
        getattr(store, api)(*args)
    # the switch: a profile without the crash gives the old -600
    soft = FakeMooncake(get_store_profile("v0.3.13").replace(crashes_without_client=False))
    out = getattr(soft.store(), api)(*args)
    assert out == INVALID or (isinstance(out, list) and set(out) <= {INVALID})


def test_before_setup_the_checking_calls_return_their_codes() -> None:
    # §7 (0.3.13.post1): these check for a client: put_from -600, get b"", the multi put [],
    # health_check 1, close 0 (never set up)
    store = FakeMooncake().store()
    assert store.put_from("k", 0x1000, 10) == INVALID
    assert store.batch_put_from_multi_buffers(["a"], [[1]], [[3]]) == []
    assert store.get("k") == b""
    assert store.health_check() == 1
    assert store.close() == 0


def test_setup_overloads(buf: Buf) -> None:
    # §1.2: positional overload needs 7 args; dict overload defaults to tcp, needs 2 keys
    fake = FakeMooncake()
    store = fake.store()
    with pytest.raises(TypeError, match="incompatible function arguments"):
        store.setup("h", "P2PHANDSHAKE", 1, 1, "rdma", "")
    assert store.setup({"local_hostname": "h"}) == INVALID
    assert store.setup({"local_hostname": "h", "metadata_server": "P2PHANDSHAKE"}) == 0
    client = store.client
    assert client is not None and client.protocol == "tcp" and store.health_check() == 0
    # §7: a second setup on a set-up store returns 0 and replaces the client
    assert store.setup({"local_hostname": "h", "metadata_server": "x"}) == 0
    assert store.client is not None and store.client is not client
    assert store.close() == 0 and store.health_check() == 1
    other = fake.store()
    assert other.setup("h", "P2PHANDSHAKE", MiB, MiB, "carrier-pigeon", "", "m") == INVALID
    assert other.setup("h", "P2PHANDSHAKE", MiB, MiB, "rdma", "mlx5_7", "m") == INVALID


def test_put_get_round_trip_byte_for_byte(mk: Mk, buf: Buf) -> None:
    # §1.2/§1.3: put_from then get_into returns the bytes read and the same bytes
    fake, store = mk()
    src, dst = buf(fake, 3 * MiB, fill=7), buf(fake, 3 * MiB)
    assert store.register_buffer(src.ctypes.data, src.nbytes) == 0
    assert store.register_buffer(dst.ctypes.data, dst.nbytes) == 0
    assert store.put_from("obj", src.ctypes.data + 12345, 2 * MiB + 3) == 0
    assert store.is_exist("obj") == 1 and store.get_size("obj") == 2 * MiB + 3
    assert store.get_into("obj", dst.ctypes.data, dst.nbytes) == 2 * MiB + 3
    assert np.array_equal(dst[:2 * MiB + 3], src[12345:12345 + 2 * MiB + 3])
    assert not dst[2 * MiB + 3:].any()
    assert store.get("obj") == src[12345:12345 + 2 * MiB + 3].tobytes()
    for p in (src.ctypes.data, dst.ctypes.data):
        assert store.unregister_buffer(p) == 0


def test_put_is_idempotent_not_overwrite(mk: Mk, buf: Buf) -> None:
    # §1.3: OBJECT_ALREADY_EXISTS is treated as success and the data is not rewritten
    fake, store = mk()
    a, b, out = buf(fake, 4096, fill=1), buf(fake, 4096, fill=2), buf(fake, 4096)
    for x in (a, b, out):
        store.register_buffer(x.ctypes.data, 4096)
    assert store.put_from("k", a.ctypes.data, 4096) == 0
    assert store.put_from("k", b.ctypes.data, 4096) == 0
    assert store.get_into("k", out.ctypes.data, 4096) == 4096
    assert np.array_equal(out, a)
    fake.close_all()


def test_get_size_checks_and_missing_key(mk: Mk, buf: Buf) -> None:
    # §1.3: buffer smaller than the object -> -600; missing key -> -704 [inferred]
    fake, store = mk()
    x = buf(fake, 8192, fill=3)
    store.register_buffer(x.ctypes.data, 8192)
    store.put_from("k", x.ctypes.data, 8192)
    assert store.get_into("k", x.ctypes.data, 8191) == INVALID
    assert store.get_into("missing", x.ctypes.data, 8192) == NOT_FOUND
    assert store.get_size("missing") == NOT_FOUND
    assert store.batch_get_into(["k", "missing"], [x.ctypes.data] * 2, [4096, 8192]) == \
        [INVALID, NOT_FOUND]
    fake.close_all()


def test_length_mismatch_fails_every_entry(mk: Mk) -> None:
    # §1.3: keys/buffer_ptrs/sizes of different lengths -> every entry INVALID_PARAMS
    _, store = mk()
    assert store.batch_put_from(["a", "b", "c"], [1, 2], [3, 4, 5]) == [INVALID] * 3
    assert store.batch_get_into(["a", "b"], [1, 2], [3]) == [INVALID] * 2
    assert store.batch_get_into_multi_buffers(["a", "b"], [[1]], [[1], [2]]) == [INVALID] * 2


def test_prefer_alloc_in_same_node_fails_puts(mk: Mk, buf: Buf) -> None:
    # §1.3: config.prefer_alloc_in_same_node=True -> INVALID_PARAMS
    fake, store = mk()
    x = buf(fake, 4096, fill=1)
    store.register_buffer(x.ctypes.data, 4096)
    cfg = ReplicateConfig()
    cfg.prefer_alloc_in_same_node = True
    assert store.put_from("k", x.ctypes.data, 4096, cfg) == INVALID
    assert store.batch_put_from(["k"], [x.ctypes.data], [4096], cfg) == [INVALID]
    assert store.put_from("k", x.ctypes.data, 4096, ReplicateConfig()) == 0
    fake.close_all()


def test_zero_size_put_from_returns_zero(mk: Mk) -> None:
    # §1.2: put_from with size 0 logs a warning and returns 0 (and stores nothing)
    _, store = mk()
    assert store.put_from("k", 0x1234, 0) == 0
    assert store.is_exist("k") == 0


def test_duplicate_keys_in_a_batch_alias(mk: Mk, buf: Buf) -> None:
    # §1.3: duplicate keys inside one batch_put_from alias: both "succeed", the last entry's
    # bytes and size are stored (measured on 0.3.13.post1, docs/mooncake-verbs.md §7.4);
    # a batch read checks every entry, and the entries that pass alias: only the last one's
    # buffer is filled (§7.4)
    fake, store = mk()
    src, d1, d2 = buf(fake, 8192, fill=5), buf(fake, 4096), buf(fake, 4096)
    src[4096:] = 9
    for x in (src, d1, d2):
        store.register_buffer(x.ctypes.data, x.nbytes)
    assert store.batch_put_from(["k", "k"], [src.ctypes.data, src.ctypes.data + 4096],
                                [4096, 100]) == [0, 0]
    assert store.get_size("k") == 100
    assert store.batch_get_into(["k", "k"], [d1.ctypes.data, d2.ctypes.data],
                                [4096, 50]) == [100, INVALID]
    assert (d1[:100] == 9).all() and not d1[100:].any() and not d2.any()
    assert store.batch_get_into(["k", "k"], [d1.ctypes.data, d2.ctypes.data],
                                [4096, 4096]) == [100, 100]
    assert (d2[:100] == 9).all() and not d2[100:].any()
    fake.close_all()


def test_unregistered_buffer_fails_on_rdma_and_works_on_tcp(mk: Mk, buf: Buf) -> None:
    # §1.3: unregistered local buffer on the RDMA path -> TRANSFER_FAIL; tcp needs no MR
    fake, store = mk()
    x = buf(fake, 4096, fill=1)
    assert store.put_from("k", x.ctypes.data, 4096) == TRANSFER_FAIL
    assert store.is_exist("k") == 0
    fake2, tcp = mk(protocol="tcp")
    y = buf(fake2, 4096, fill=1)
    assert tcp.put_from("k", y.ctypes.data, 4096) == 0
    z = buf(fake2, 4096)
    assert tcp.get_into("k", z.ctypes.data, 4096) == 4096 and np.array_equal(z, y)


def test_store_memcpy_switch_lets_unregistered_buffers_work(buf: Buf) -> None:
    # §1.3 [inferred]: with MC_STORE_MEMCPY=1 an unregistered buffer can still "work"
    from kvreg.fakes.mooncake import get_store_profile

    fake = FakeMooncake(get_store_profile("released").replace(store_memcpy=True), env={})
    store = fake.store()
    assert store.setup("h", "P2PHANDSHAKE", MiB, MiB, "rdma", "", "m") == 0
    x = buf(fake, 4096, fill=1)
    assert store.put_from("k", x.ctypes.data, 4096) == 0


def test_multi_buffer_round_trip(mk: Mk, buf: Buf) -> None:
    # §1.2 / §3.4: one object per key gathered from several buffers, scattered back
    fake, store = mk()
    src, dst = buf(fake, 64 * 1024, fill=9), buf(fake, 64 * 1024)
    for x in (src, dst):
        store.register_buffer(x.ctypes.data, x.nbytes)
    s, d = src.ctypes.data, dst.ctypes.data
    layers = [[s + 0, s + 16384, s + 32768], [s + 4096, s + 20480, s + 36864]]
    sizes = [[4096] * 3, [4096] * 3]
    assert store.batch_put_from_multi_buffers(["p0", "p1"], layers, sizes) == [0, 0]
    back = [[d + 0, d + 16384, d + 32768], [d + 4096, d + 20480, d + 36864]]
    assert store.batch_get_into_multi_buffers(["p0", "p1"], back, sizes) == [12288, 12288]
    i = np.arange(64 * 1024)
    assert np.array_equal(dst, src * ((i % 16384 < 8192) & (i < 49152)))
    assert store.batch_get_into_multi_buffers(["p0"], [[d, d + 4096]], [[4096]]) == [INVALID]
    # the trace names the API that was really called
    apis = {e.api for e in fake.trace}
    assert {"batch_put_from_multi_buffers", "batch_get_into_multi_buffers"} <= apis
    assert "batch_put_from" not in apis
    fake.close_all()


def test_exist_remove_and_regex(mk: Mk) -> None:
    # §1.2: is_exist 1/0, batch_is_exist, remove 0/-704, remove_by_regex/remove_all counts
    _, store = mk()
    for k in ("a_k", "a_v", "b_k"):
        assert store.put(k, b"x" * 10) == 0
    assert store.batch_is_exist(["a_k", "zz", "b_k"]) == [1, 0, 1]
    assert store.remove("zz") == NOT_FOUND
    # §7: batch_is_exist leased a_k and b_k; a_v was never read
    assert store.remove_by_regex(r"^a_") == 1 and store.is_exist("a_k") == 1
    assert store.remove_by_regex(r"^a_", True) == 1 and store.is_exist("a_k") == 0
    assert store.remove_by_regex("(") == INVALID
    assert store.batch_remove(["b_k", "b_k"]) == [HAS_LEASE, HAS_LEASE]
    assert store.batch_remove(["b_k", "b_k"], True) == [0, NOT_FOUND]
    assert store.put("c", bytearray(b"hello")) == 0
    assert store.put("d", b"unread") == 0
    assert store.get("c") == b"hello" and store.get("nope") == b""
    assert store.remove_all() == 1 and store.is_exist("d") == 0   # c is leased
    assert store.remove_all(True) == 1 and store.is_exist("c") == 0


def test_stores_sharing_a_master_share_objects(buf: Buf) -> None:
    # two clients on two nodes of one fabric, one master: a put on one is readable on the other
    fake = FakeMooncake(env={})
    fake.fabric.add_node("node1")
    fake.fabric.add_device("mlx5_0", node="node1")
    s0, s1 = fake.store(), fake.store("node1")
    for s in (s0, s1):
        assert s.setup("h", "P2PHANDSHAKE", MiB, MiB, "rdma", "", "m:1") == 0
    src = buf(fake, 4096, fill=4)
    dst = fake.track(np.zeros(4096, np.uint8), node="node1")
    assert s0.register_buffer(src.ctypes.data, 4096) == 0
    assert s1.register_buffer(dst.ctypes.data, 4096) == 0
    assert s0.put_from("page", src.ctypes.data, 4096) == 0
    assert s1.get_into("page", dst.ctypes.data, 4096) == 4096
    assert np.array_equal(src, dst)
    fake.close_all()


def test_virtual_objects_have_sizes_but_no_bytes(mk: Mk, buf: Buf) -> None:
    fake, store = mk()
    pool = fake.virtual(1 << 30, name="pool")
    out = buf(fake, 4096)
    assert store.register_buffer(pool.data_ptr(), 1 << 30) == 0
    store.register_buffer(out.ctypes.data, 4096)
    assert store.put_from("v", pool.data_ptr() + 8192, 4096) == 0
    assert store.get_into("v", out.ctypes.data, 4096) == 4096
    assert not out.any()                                # nothing was invented
    with pytest.raises(TypeError, match="virtual memory"):
        store.get("v")
    fake.close_all()


def test_unmodelled_methods_and_bad_pointers_fail_loudly(mk: Mk) -> None:
    _fake, store = mk(protocol="tcp")
    with pytest.raises(NotModelledError, match="get_buffer"):
        store.get_buffer("k")
    with pytest.raises(TypeError):
        store.put_from("k", "0x1000", 4096)


def test_close_unregisters_everything(mk: Mk, buf: Buf) -> None:
    # §1.2: close -> tearDownAll, drops the client; every MR is gone
    fake, store = mk()
    x = buf(fake, 4096)
    store.register_buffer(x.ctypes.data, 4096)
    assert fake.fabric.live_mrs() and fake.leak_report()
    assert store.close() == 0
    assert fake.fabric.live_mrs() == [] and fake.leak_report() == ""
    with pytest.raises(StoreCrash):     # §7: the real store segfaults here
        store.register_buffer(x.ctypes.data, 4096)
