"""The real master: it starts on free ports, serves stores, and leaves nothing behind.

Proves with the real binary what tests/realhw/test_mooncake_master.py proves with stand-ins:
after ``stop()`` the pid is gone and its ports can be bound again; a master killed under a
live store is reported with its log.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import pytest

from kvreg.realhw.mooncake_master import MasterFailed, package_version
from kvreg.realhw.mooncake_real import RealMooncake

from ..helpers.mooncake_masters import start_master

pytestmark = pytest.mark.kvreg_mooncake_real


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _bindable(port: int, host: str) -> bool:
    """Nothing listens there: a new listener can take the port (SO_REUSEADDR lets it past
    the TIME_WAIT connections a stopped server leaves, never past a live listener)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
            s.listen()
        except OSError:
            return False
    return True


def test_the_installed_wheel_is_the_profiled_version() -> None:
    assert package_version() == "0.3.13.post1"


def test_no_process_or_port_is_left_behind(tmp_path: Path) -> None:
    m = start_master(tmp_path)
    try:
        with RealMooncake(m) as real:
            store = real.store(16 << 20, 16 << 20)
            assert store.put("k", b"v") == 0 and store.get("k") == b"v"
    finally:
        pid = m.pid
        code = m.stop()
    assert pid is not None and _gone(pid)
    assert code == 0                         # SIGTERM: the master exits cleanly
    for port in (m.rpc_port, m.http_port, m.metrics_port):
        assert _bindable(port, m.host), port


def test_a_master_that_dies_under_a_store_is_reported_with_its_log(tmp_path: Path) -> None:
    m = start_master(tmp_path)
    try:
        real = RealMooncake(m)
        assert m.proc is not None
        m.proc.kill()
        m.proc.wait(10)
        # no store is set up on a dead master: the next one fails with the log instead
        # (a store set up before the kill would wait on the master's RPC to close)
        with pytest.raises(MasterFailed, match="exited with -9; log: "):
            real.store()
        assert real.stores == []
    finally:
        m.stop()


def test_the_module_master_serves(master: Any, real: Any) -> None:
    store = real.store()
    assert store.health_check() == 0 and master.alive()
