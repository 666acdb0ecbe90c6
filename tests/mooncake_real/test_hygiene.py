"""The tier's network hygiene: its own network namespace, and no socket of the real master
or stores on an address that exists outside it.

Mooncake 0.3.13.post1 binds wildcard addresses whatever it is told and announces an
interface address (realhw/mooncake_netns.py has the upstream lines), so the launcher
(``bash .ci/mooncake-real PYTHON test``) runs the tier in a fresh namespace: loopback and one
private address. Here the real processes' sockets are read from /proc/<pid>/fd and
/proc/<pid>/net/{tcp,tcp6,udp,udp6,raw,raw6}, and what the engine announces is read back
from the master's metadata server.
"""

from __future__ import annotations

import errno
import ipaddress
import json
import os
import socket
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from kvreg.realhw.mooncake_master import ClientProcess
from kvreg.realhw.mooncake_netns import (
    foreign_sockets,
    local_addresses,
    namespace_info,
    netns_id,
    process_sockets,
)
from kvreg.realhw.mooncake_real import MiB, RealMooncake, setup_args

from ..helpers.mooncake_masters import start_master

pytestmark = pytest.mark.kvreg_mooncake_real


def _info() -> dict[str, Any]:
    info = namespace_info()
    assert info is not None, "the tier runs only under its launcher"
    return dict(info)


def _outside() -> set[str]:
    """The addresses of the launcher's namespace: its record, and PID 1's /proc/net view."""
    return {a for a in set(_info()["outer_addresses"]) | local_addresses(1)
            if not ipaddress.ip_address(a).is_loopback}


def _metadata(url: str, key: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{url}?key={urllib.parse.quote(key, safe='')}",
                                timeout=10) as reply:
        return dict(json.loads(reply.read()))


def test_the_tier_runs_in_its_own_network_namespace() -> None:
    info = _info()
    own = netns_id()
    assert own is not None and own != info["outer_netns"]
    pid1 = netns_id(1)        # a sandbox may deny it even to root: the launcher's record holds
    assert pid1 != own
    here = local_addresses()
    assert here - {"::1"} == {"127.0.0.1", info["address"]}
    assert not here & _outside()
    assert info["address"] not in _outside()


def test_no_address_outside_the_namespace_is_reachable() -> None:
    tried = 0
    for address in sorted(_outside()):
        ip = ipaddress.ip_address(address)
        if ip.is_link_local:         # needs an interface scope, and there is none here
            continue
        family = socket.AF_INET if ip.version == 4 else socket.AF_INET6
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.settimeout(5)
            assert s.connect_ex((address, 9)) == errno.ENETUNREACH, address
        tried += 1
    assert tried or not _outside()


def test_every_socket_of_the_master_and_stores_stays_in_the_namespace(tmp_path: Path) -> None:
    address = _info()["address"]
    master = start_master(tmp_path)
    client = ClientProcess(master=master, log_dir=tmp_path)
    try:
        client.start()
        with RealMooncake(master) as real:
            a = real.new()
            args = setup_args(master, 16 * MiB, 16 * MiB)
            assert a.setup(*args) == 0
            b = real.store(16 * MiB, 16 * MiB)
            assert a.put("k", b"v" * 65536) == 0 and b.get("k") == b"v" * 65536
            rpc = _metadata(master.metadata_url, f"mooncake/rpc_meta/{args[0]}")
            ram = _metadata(master.metadata_url, f"mooncake/ram/{args[0]}")
            assert master.pid is not None and client.pid is not None
            socks = {name: process_sockets(pid) for name, pid in
                     (("master", master.pid), ("client", client.pid),
                      ("stores (this process)", os.getpid()))}
    finally:
        client.stop()
        master.stop()
    # what the engine tells its peers: the private address, never an interface's
    assert (rpc["ip_or_host_name"], ram["tcp_data_host"]) == (address, address)
    # a wildcard bind reaches only this namespace's interfaces: loopback and the address
    wildcard_ok = local_addresses() - {"127.0.0.1", "::1"} == {address}
    assert wildcard_ok
    for name, found in socks.items():
        listening = [s for s in found if s.state == "LISTEN"]
        assert listening, f"{name}: no listening socket read (the reader sees nothing?)"
        assert foreign_sockets(found, {address}, wildcard_ok=wildcard_ok) == [], name
        assert not {s.local for s in found} & _outside(), name
        assert not {s.remote for s in found} & _outside(), name
    assert len([s for s in socks["master"] if s.state == "LISTEN"]) >= 3  # rpc, http, metrics


def test_a_process_left_in_a_namespace_is_stopped_and_fails_the_run() -> None:
    """The launcher itself, nested here: a command that leaves a child behind."""
    done = subprocess.run([sys.executable, "-m", "kvreg.realhw.mooncake_netns", "--address",
                           "10.78.0.1", "--", "sh", "-c", "sleep 300 & echo $!"],
                          capture_output=True, text=True, timeout=60, check=False)
    pid = int(done.stdout.split()[0])
    assert done.returncode == 1, done.stderr
    assert f"stopped 1 process(es) left in the namespace: {pid}" in done.stderr
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
