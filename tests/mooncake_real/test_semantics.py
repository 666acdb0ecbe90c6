"""Each divergence the fake used to have, run on the real store and on the fake side by side.

Every test performs the same steps on a real store (``real`` fixture) and on a fake one
(profile ``v0.3.13``), asserts the observations are equal, and asserts the value itself, so
a fake that agreed by accident with a wrong expectation fails too (docs/mooncake-verbs.md §7).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kvreg.fakes.mooncake import FakeMooncake, get_store_profile
from kvreg.realhw.mooncake_real import setup_args

from ..helpers.mooncake_masters import LONG_LEASE_MS, start_master

pytestmark = pytest.mark.kvreg_mooncake_real

MiB = 1 << 20
LEASED, NOT_FOUND, INVALID, NO_HANDLE = -706, -704, -600, -200
PROFILE = get_store_profile("v0.3.13").replace(default_kv_lease_ttl_ms=LONG_LEASE_MS)


class FakeSide:
    """Fake stores of one FakeMooncake, set up like the real ones; a clock to advance."""

    def __init__(self, master: Any, profile: Any = PROFILE) -> None:
        self.fake = FakeMooncake(profile, env={})
        self.master = master
        self.now = 0.0
        self.fake.cluster(master.address).clock = lambda: self.now

    def store(self, global_segment: int = 64 * MiB, local_buffer: int = 16 * MiB) -> Any:
        s = self.fake.store()
        assert s.setup(*setup_args(self.master, global_segment, local_buffer)) == 0
        return s

    def wait(self, seconds: float) -> None:
        self.now += seconds


def both(real: Any, master: Any, steps: Callable[..., list[Any]],
         profile: Any = PROFILE) -> list[Any]:
    """``steps(deployment, wait)`` on the real store and on the fake; equal, or fail."""
    got_real = steps(real, time.sleep)
    side = FakeSide(master, profile)
    try:
        got_fake = steps(side, side.wait)
    finally:
        side.fake.close_all()
    assert got_real == got_fake, f"real {got_real} != fake {got_fake}"
    return got_real


def test_a_second_setup_returns_0_and_replaces_the_client(real: Any, master: Any) -> None:
    def steps(d: Any, wait: Any) -> list[Any]:
        s = d.store()
        a = np.arange(4096, dtype=np.uint8)
        out = [s.register_buffer(a.ctypes.data, 4096), s.put_from("k", a.ctypes.data, 100)]
        out.append(s.setup(*setup_args(master, 64 * MiB, 16 * MiB)))
        # the old client's segment (and object) and registration are gone
        out += [s.get_size("k"), s.register_buffer(a.ctypes.data, 4096), s.close()]
        return out

    assert both(real, master, steps) == [0, 0, 0, NOT_FOUND, 0, 0]


def test_a_read_takes_a_lease_and_remove_is_refused(real: Any, master: Any) -> None:
    def steps(d: Any, wait: Any) -> list[Any]:
        s, other = d.store(), d.store(global_segment=0)
        a, b = np.arange(4096, dtype=np.uint8), np.zeros(4096, np.uint8)
        out = [s.put_from(k, a.ctypes.data, 100) for k in ("r", "e", "z", "p")]
        out += [s.remove("p"),                         # never read: removable
                s.get_into("r", b.ctypes.data, 4096), s.remove("r"), other.remove("r"),
                s.is_exist("r"), s.remove("r", True),  # force removes a leased object
                s.is_exist("e"), s.remove("e"), s.get_size("z"), s.remove("z")]
        s.remove_all(True)
        return out

    assert both(real, master, steps) == [0, 0, 0, 0, 0, 100, LEASED, LEASED, 1, 0,
                                         1, LEASED, 100, LEASED]


def test_the_lease_ends_after_default_kv_lease_ttl(real: Any, tmp_path: Path) -> None:
    # a master of its own with a 300 ms lease; the fake's clock is advanced instead
    short = start_master(tmp_path, lease_ttl_ms=300)
    try:
        from kvreg.realhw.mooncake_real import RealMooncake

        def steps(d: Any, wait: Any) -> list[Any]:
            s = d.store()
            a = np.arange(4096, dtype=np.uint8)
            out = [s.put_from("k", a.ctypes.data, 10), s.get("k") == a[:10].tobytes(),
                   s.remove("k")]
            wait(1.5)
            return [*out, s.remove("k")]

        with RealMooncake(short) as deployment:
            assert both(deployment, short, steps,
                        PROFILE.replace(default_kv_lease_ttl_ms=300)) == [0, True, LEASED, 0]
    finally:
        short.stop()


def test_remove_all_counts_the_masters_objects_and_skips_leased(real: Any,
                                                                 master: Any) -> None:
    def steps(d: Any, wait: Any) -> list[Any]:
        s, other = d.store(), d.store(global_segment=0)
        a, b = np.arange(4096, dtype=np.uint8), np.zeros(4096, np.uint8)
        out = [s.put_from("x1", a.ctypes.data, 10), s.put_from("x2", a.ctypes.data, 10),
               other.put_from("y1", a.ctypes.data, 10), other.put("y2", b"abc"),
               s.get_into("x1", b.ctypes.data, 10)]
        out += [other.remove_all(), s.is_exist("x1"), s.is_exist("y1"), s.remove_all(True)]
        return out

    assert both(real, master, steps) == [0, 0, 0, 0, 10, 3, 1, 0, 1]


def test_objects_live_in_segments(real: Any, master: Any) -> None:
    def steps(d: Any, wait: Any) -> list[Any]:
        lone = d.store(global_segment=0)
        a = np.arange(4096, dtype=np.uint8)
        out = [lone.put_from("k", a.ctypes.data, 10)]    # no segment anywhere
        holder = d.store()
        out += [lone.put_from("k", a.ctypes.data, 10), lone.get_size("k"), holder.close(),
                lone.get_size("k"), lone.put("k2", b"x"), lone.close()]
        return out

    assert both(real, master, steps) == [NO_HANDLE, 0, 10, 0, NOT_FOUND, NO_HANDLE, 0]


def test_tcp_needs_no_registration(real: Any, master: Any) -> None:
    def steps(d: Any, wait: Any) -> list[Any]:
        s = d.store()
        a, b = np.arange(8192, dtype=np.uint8) % 251, np.zeros(8192, np.uint8)
        out = [s.put_from("k", a.ctypes.data + 5, 5000), s.get_into("k", b.ctypes.data, 8192),
               bool((b[:5000] == a[5:5005]).all())]
        s.remove_all(True)
        return out

    assert both(real, master, steps) == [0, 5000, True]


def test_a_dummy_client_refuses_process_memory(real: Any, master: Any,
                                               tmp_path: Path) -> None:
    from kvreg.realhw.mooncake_master import ClientProcess

    client = ClientProcess(master=master, log_dir=tmp_path)
    try:
        client.start()

        def steps(d: Any, wait: Any) -> list[Any]:
            s = (d.new() if hasattr(d, "new") else d.fake.store())
            a, b = np.arange(4096, dtype=np.uint8), np.zeros(4096, np.uint8)
            out = [s.setup_dummy(16 * MiB, 16 * MiB, client.address),
                   s.register_buffer(a.ctypes.data, 4096), s.put_from("k", a.ctypes.data, 10),
                   s.put("k2", b"abc"), s.get("k2"), s.get_into("k2", b.ctypes.data, 10),
                   s.remove("k2"), s.close()]
            return out

        fake_without_client = both(real, master, steps)
        assert fake_without_client == [0, -1, INVALID, 0, b"abc", INVALID, LEASED, 0]
    finally:
        client.stop()
