"""What the fake store returns and records at edges only a wrong fake would change
(fakes/mooncake/session.py). Each was a surviving mutant (docs/mutation-testing.md); the
behaviour is the real store's as docs/mooncake-verbs.md gives it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kvreg.fakes.mooncake import FakeMooncake

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
