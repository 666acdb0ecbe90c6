"""The transfer engine's facts, side by side: each test runs the same calls on two real
``mooncake.engine.TransferEngine`` objects and on two fake ones and asserts both give the
values docs/mooncake-verbs.md §8 states (0.3.13.post1, P2P handshake, tcp). Calls that
segfault the real binding before ``initialize()`` run in child processes (§8.1).
"""

from __future__ import annotations

import ctypes
import signal
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from kvreg.fakes.mooncake import EngineCrash, FakeMooncake, get_store_profile
from kvreg.fakes.mooncake.engine import CRASHING

pytestmark = pytest.mark.kvreg_mooncake_real

PROFILE = get_store_profile("v0.3.13")
KiB = 1024
TIMEOUT = 120


class Pair:
    """Two initialized engines, ``a`` and ``b``, and a 1 MiB buffer for each."""

    def __init__(self, make: Callable[[], Any], host: str) -> None:
        self.host = host
        self.a, self.b = make(), make()
        for engine in (self.a, self.b):
            assert engine.initialize(host, "P2PHANDSHAKE", "tcp", "") == 0
        self.abuf = ctypes.create_string_buffer(1024 * KiB)
        self.bbuf = ctypes.create_string_buffer(1024 * KiB)
        self.A, self.B = ctypes.addressof(self.abuf), ctypes.addressof(self.bbuf)

    def seg(self, engine: Any) -> str:
        return f"{self.host}:{engine.get_rpc_port()}"


def _both(engine_module: Any) -> list[Pair]:
    from kvreg.realhw.mooncake_netns import tier_host

    host = tier_host()
    fake = FakeMooncake(PROFILE, devices={}, env={})
    return [Pair(engine_module.TransferEngine, host), Pair(fake.engine, host)]


def _same(engine_module: Any, calls: Callable[[Pair], list[Any]]) -> list[Any]:
    real, fake = (calls(p) for p in _both(engine_module))
    assert real == fake, f"real {real} != fake {fake}"
    return real


def test_the_issue_codes(engine_module: Any) -> None:
    # the five codes issue 28 lists: overlap -7, zero length -1, a batch duplicate -7, a
    # write to an unregistered remote address -1, a second unregister -3
    def calls(p: Pair) -> list[Any]:
        return [p.a.register_memory(p.A, 64 * KiB), p.a.register_memory(p.A + 4 * KiB, 4 * KiB),
                p.a.register_memory(p.A + 128 * KiB, 0),
                p.a.batch_register_memory([p.A + 256 * KiB] * 2, [4 * KiB] * 2),
                p.a.transfer_sync_write(p.seg(p.b), p.A, p.B, 8),
                p.a.unregister_memory(p.A), p.a.unregister_memory(p.A)]
    assert _same(engine_module, calls) == [0, -7, -1, -7, -1, 0, -3]


def test_batch_checks_come_first_and_register_nothing(engine_module: Any) -> None:
    # #2854 (in v0.3.12): zero length and overlaps inside the batch refuse it whole
    def calls(p: Pair) -> list[Any]:
        x = p.A + 512 * KiB
        return [p.a.batch_register_memory([x, x + 64 * KiB], [4 * KiB, 0]),
                p.a.batch_register_memory([x + 8 * KiB, x], [4 * KiB, 16 * KiB]),
                p.a.register_memory(x, 4 * KiB), p.a.batch_register_memory([], []),
                p.a.batch_unregister_memory([])]
    assert _same(engine_module, calls) == [-1, -7, 0, 0, 0]


def test_a_batch_unregister_naming_an_unknown_address_strands_the_others(
        engine_module: Any) -> None:
    # #2869: -3, the known buffers leave the segment but stay in the region map: registering
    # them again is -7, unregistering them is -3, remote writes to them fail
    def calls(p: Pair) -> list[Any]:
        x = p.B
        return [p.b.batch_register_memory([x, x + 8 * KiB], [4 * KiB, 4 * KiB]),
                p.b.batch_unregister_memory([x, x + 64 * KiB, x + 8 * KiB]),
                p.b.register_memory(x, 4 * KiB), p.b.unregister_memory(x),
                p.a.transfer_sync_write(p.seg(p.b), p.A, x, 8)]
    assert _same(engine_module, calls) == [0, -3, -7, -3, -1]


def test_transfers_need_the_remote_range_inside_one_registered_buffer(
        engine_module: Any) -> None:
    def calls(p: Pair) -> list[Any]:
        p.abuf[0:8] = b"ABCDEFGH"
        out = [p.b.register_memory(p.B, 8 * KiB), p.b.register_memory(p.B + 8 * KiB, 8 * KiB),
               p.a.transfer_sync_write(p.seg(p.b), p.A, p.B + 100, 8),   # local unregistered
               p.a.transfer_sync_write(p.seg(p.b), p.A, p.B + 8 * KiB - 4, 8),  # straddles
               p.a.transfer_sync_write(p.seg(p.b), p.A, p.B + 16 * KiB - 4, 8),  # runs past
               p.a.transfer_sync_write(p.seg(p.b), p.A, p.B + 64 * KiB, 0),  # zero: nothing
               p.a.transfer_sync_read(p.seg(p.b), p.A + 200, p.B + 100, 8),
               p.a.transfer_sync_write(f"{p.host}:1", p.A, p.B, 8),
               p.a.batch_transfer_sync_write(p.seg(p.b), [p.A], [p.B, p.B], [8])]
        return [*out, p.bbuf.raw[100:108], p.abuf.raw[200:208]]
    assert _same(engine_module, calls) == [0, 0, 0, -1, -1, 0, 0, -1, -1, b"ABCDEFGH",
                                           b"ABCDEFGH"]


def test_the_first_buffer_of_a_peer_is_as_first_seen(engine_module: Any) -> None:
    # §8.5: a peer's descriptor is fetched once; its own segment is read live
    def calls(p: Pair) -> list[Any]:
        first = [p.a.get_first_buffer_address(p.seg(p.b))]
        p.b.register_memory(p.B, 4 * KiB)
        return [*first, p.a.get_first_buffer_address(p.seg(p.b)),
                p.b.get_first_buffer_address(p.seg(p.b)) - p.B,
                p.a.get_first_buffer_address(f"{p.host}:1")]
    assert _same(engine_module, calls) == [0, 0, 0, 0]


def test_managed_buffers_come_from_slab_stacks(engine_module: Any) -> None:
    # §8.6: 8 KiB slabs split from 16 KiB ones (the last pushed handed out first); a freed
    # slab is the next one handed out; any address can be "freed"; slabs are registered
    def calls(p: Pair) -> list[Any]:
        m1 = p.a.allocate_managed_buffer(4 * KiB)
        m2 = p.a.allocate_managed_buffer(4 * KiB)
        return [m2 - m1, p.a.free_managed_buffer(m1, 4 * KiB),
                p.a.allocate_managed_buffer(4 * KiB) == m1, p.a.register_memory(m1, 4 * KiB),
                p.a.free_managed_buffer(p.A, 4 * KiB), p.a.allocate_managed_buffer(4) == p.A]
    assert _same(engine_module, calls) == [-8 * KiB, 0, True, -7, 0, True]


def _child(body: str) -> subprocess.CompletedProcess[str]:
    code = "from mooncake.engine import TransferEngine as T\n" + body
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=TIMEOUT, check=False)


ARGS = {"get_rpc_port": "()", "register_memory": "(0x1000, 4096)",
        "unregister_memory": "(0x1000,)", "batch_register_memory": "([0x1000], [4096])",
        "batch_unregister_memory": "([0x1000],)",
        "transfer_sync_write": "('127.0.0.1:1', 0x1000, 0x1000, 8)",
        "batch_transfer_sync_write": "('127.0.0.1:1', [0x1000], [0x1000], [8])",
        "get_first_buffer_address": "('127.0.0.1:1',)", "allocate_managed_buffer": "(4096,)",
        "free_managed_buffer": "(0x1000, 4096)", "get_notifies": "()"}


@pytest.mark.parametrize("api", sorted(ARGS))
def test_before_initialize_the_call_segfaults(engine_module: Any, api: str) -> None:
    assert api in CRASHING
    done = _child(f"e = T()\nprint('calling', flush=True)\ne.{api}{ARGS[api]}\n"
                  "print('survived', flush=True)\n")
    assert done.returncode == -signal.SIGSEGV, (done.returncode, done.stdout,
                                                done.stderr[-2000:])
    assert "calling" in done.stdout and "survived" not in done.stdout
    with pytest.raises(EngineCrash, match=api):
        getattr(FakeMooncake(PROFILE).engine(), api)(*eval(ARGS[api]))


def test_before_initialize_the_checking_calls_return(engine_module: Any) -> None:
    body = ("import ctypes\nb = ctypes.create_string_buffer(16)\np = ctypes.addressof(b)\n"
            "e = T()\nprint(repr([e.write_bytes_to_buffer(p, b'ab', 2), "
            "e.read_bytes_from_buffer(p, 2), e.get_batch_transfer_status([]), "
            "e.send_probe('127.0.0.1:1')]), flush=True)\n")
    done = _child(body)
    assert done.returncode == 0, done.stderr[-2000:]
    real = eval(done.stdout.strip().splitlines()[-1])
    buf = ctypes.create_string_buffer(16)
    e = FakeMooncake(PROFILE).engine()
    p = ctypes.addressof(buf)
    fake = [e.write_bytes_to_buffer(p, b"ab", 2), e.read_bytes_from_buffer(p, 2),
            e.get_batch_transfer_status([]), e.send_probe("127.0.0.1:1")]
    assert real == fake == [0, b"ab", 0, -1]


def test_every_socket_of_p2p_engines_stays_in_the_namespace(engine_module: Any) -> None:
    # issue 28's hygiene: P2P engines listen on wildcards (RPC, tcp transport) and announce
    # MC_TCP_BIND_ADDRESS; inside the tier's namespace a wildcard reaches only lo and it
    import os

    from kvreg.realhw.mooncake_netns import (
        foreign_sockets,
        local_addresses,
        namespace_info,
        process_sockets,
    )

    info = namespace_info()
    assert info is not None, "the tier runs only under its launcher"
    address = str(info["address"])
    p = _both(engine_module)[0]
    assert p.b.register_memory(p.B, 4 * KiB) == 0
    assert p.a.transfer_sync_write(p.seg(p.b), p.A, p.B, 8) == 0
    found = process_sockets(os.getpid())
    assert [s for s in found if s.state == "LISTEN"], "no listening socket read"
    wildcard_ok = local_addresses() - {"127.0.0.1", "::1"} == {address}
    assert wildcard_ok
    assert foreign_sockets(found, {address}, wildcard_ok=wildcard_ok) == []
    outside = set(info["outer_addresses"]) - {"127.0.0.1", "::1"}
    assert not {s.local for s in found} & outside
    assert not {s.remote for s in found} & outside
    assert p.seg(p.b).startswith(f"{address}:")
