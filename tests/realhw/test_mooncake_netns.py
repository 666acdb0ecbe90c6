"""The mooncake-real tier's namespace launcher and socket reader (realhw/mooncake_netns.py), on
loopback only: no namespace is made and nothing real starts here.

The reader must catch a socket on an address of the host (bound or connected), a wildcard
bind where the namespace is not private, a packet socket and one it cannot place, and pass
loopback, the namespace's private address and a wildcard bind inside it. A forged
environment variable must not pass for the namespace.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvreg.realhw import mooncake_netns as mn
from kvreg.realhw.mooncake_netns import Sock, foreign_sockets

# /proc/net/fib_trie of a host with eth0 192.0.2.2/24 (shape read on this machine)
FIB_TRIE = """Main:
  +-- 0.0.0.0/0 3 0 5
     |-- 0.0.0.0
        /0 universe UNICAST
     +-- 127.0.0.0/8 2 0 2
        +-- 127.0.0.0/31 1 0 0
           |-- 127.0.0.0
              /8 host LOCAL
           |-- 127.0.0.1
              /32 host LOCAL
        |-- 127.255.255.255
           /32 link BROADCAST
     +-- 192.0.2.0/24 2 0 2
        +-- 192.0.2.0/30 2 0 2
           |-- 192.0.2.0
              /24 link UNICAST
           |-- 192.0.2.2
              /32 host LOCAL
        |-- 192.0.2.255
           /32 link BROADCAST
"""
IF_INET6 = """00000000000000000000000000000001 01 80 10 80       lo
fe8000000000000000fc00fffe000001 04 40 20 80     eth0
fd000000000000000000000000000002 04 40 00 82     eth0
"""
TCP = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:9A9D 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 12387 1 0 100 0 0 10 0
   1: 020200C0:D741 0302000A:1F90 01 00000000:00000000 00:00000000 00000000     0        0 11691 1 0 20 4 22 15 -1
"""  # noqa: E501
TCP6 = """  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:3F6F 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 11694 1 0 100 0 0 10 0
   1: 0000000000000000FFFF00000100007F:3F6F 0000000000000000FFFF00000100007F:A000 01 00000000:00000000 00:00000000 00000000     0        0 11695 1 0 100 0 0 10 0
"""  # noqa: E501
PRIVATE = "10.77.0.1"


def test_the_kernels_tables_are_read_as_addresses() -> None:
    assert mn.parse_fib_trie(FIB_TRIE) == {"127.0.0.1", "192.0.2.2"}
    assert mn.parse_if_inet6(IF_INET6) == {"::1", "fe80::fc:ff:fe00:1", "fd00::2"}
    v4 = mn.parse_ip_table(TCP, "tcp")
    assert v4 == {12387: ("127.0.0.1", 39581, "0.0.0.0", 0, "LISTEN"),
                  11691: ("192.0.2.2", 55105, "10.0.2.3", 8080, "ESTABLISHED")}
    v6 = mn.parse_ip_table(TCP6, "tcp6")
    assert v6[11694] == ("::", 16239, "::", 0, "LISTEN")
    assert v6[11695] == ("127.0.0.1", 16239, "127.0.0.1", 40960, "ESTABLISHED")   # v4-mapped


def _tcp(local: str, remote: str = "0.0.0.0", state: str = "LISTEN") -> Sock:
    return Sock(1, 7, "tcp", local, 5000, remote, 0, state)


CORRECT = [_tcp("127.0.0.1"), _tcp(PRIVATE), _tcp(PRIVATE, PRIVATE, "ESTABLISHED"),
           _tcp("127.0.0.1", "127.0.0.1", "ESTABLISHED"), _tcp("0.0.0.0"),
           Sock(1, 8, "tcp6", "::1", 1, "::", 0, "LISTEN"), Sock(1, 9, "tcp6", "::", 1, "::", 0,
                                                                  "LISTEN"),
           Sock(1, 10, "unix"), Sock(1, 11, "netlink"), Sock(1, 12, "unbound"),
           _tcp("0.0.0.0", state="BOUND")]


def test_loopback_the_private_address_and_wildcards_inside_pass() -> None:
    assert foreign_sockets(CORRECT, {PRIVATE}, wildcard_ok=True) == []


@pytest.mark.parametrize(("sock", "why"), [
    (_tcp("192.0.2.2"), "bound to 192.0.2.2"),
    (_tcp(PRIVATE, "192.0.2.7", "ESTABLISHED"), "connected to 192.0.2.7"),
    (Sock(1, 8, "tcp6", "fd00::2", 1, "::", 0, "LISTEN"), "bound to fd00::2"),
    (Sock(1, 9, "udp", PRIVATE, 1, "8.8.8.8", 53, "01"), "connected to 8.8.8.8"),
    (Sock(1, 10, "packet"), "a packet socket"),
    (Sock(1, 11, "unknown"), "not an IP, unix, netlink or packet socket"),
])
def test_a_socket_outside_the_namespace_is_caught(sock: Sock, why: str) -> None:
    found = foreign_sockets([*CORRECT, sock], {PRIVATE}, wildcard_ok=True)
    assert len(found) == 1 and found[0].endswith(why), found


def test_a_wildcard_bind_is_caught_where_the_namespace_is_not_private() -> None:
    found = foreign_sockets([_tcp("0.0.0.0"), _tcp("127.0.0.1")], {PRIVATE}, wildcard_ok=False)
    assert found == ["pid 1 tcp socket:[7] 0.0.0.0:5000 -> 0.0.0.0:0 LISTEN: bound to every "
                     "interface"]


def test_this_processs_own_sockets_are_read_with_their_addresses() -> None:
    with socket.socket() as listening, socket.socket() as bound, socket.socket() as fresh, \
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        bound.bind(("127.0.0.1", 0))               # bound, never listening: on no table
        udp.bind(("127.0.0.1", 0))
        socks = {s.inode: s for s in mn.process_sockets(os.getpid())}

        def of(s: socket.socket) -> Sock:
            return socks[os.fstat(s.fileno()).st_ino]

        assert (of(listening).proto, of(listening).local, of(listening).state) == \
            ("tcp", "127.0.0.1", "LISTEN")
        assert of(listening).local_port == listening.getsockname()[1]
        assert (of(bound).local, of(bound).local_port, of(bound).state) == \
            ("127.0.0.1", bound.getsockname()[1], "BOUND")
        assert (of(udp).proto, of(udp).local) == ("udp", "127.0.0.1")
        assert of(fresh).proto == "unbound"
        assert foreign_sockets(socks.values(), set(), wildcard_ok=False) == []


def test_a_socket_closed_while_it_is_read_is_gone_not_unknown(tmp_path: Path) -> None:
    """The master's HTTP server closes a served connection between the listing of its
    descriptors and the reading of /proc/net (CI, stop 32): gone, not a foreign socket."""
    s = socket.socket()
    fd, inode = s.fileno(), os.fstat(s.fileno()).st_ino
    s.close()
    assert mn._unlisted(os.getpid(), inode, fd) is None
    with open(tmp_path / "f", "w") as other:        # the number reused by another file
        assert other.fileno() == fd
        assert mn._unlisted(os.getpid(), inode, fd) is None
    with socket.socket(socket.AF_UNIX) as unix:      # still open, and on no IP table
        assert mn._unlisted(os.getpid(), os.fstat(unix.fileno()).st_ino,
                            unix.fileno()) == Sock(os.getpid(), os.fstat(unix.fileno()).st_ino,
                                                   "unknown")


@pytest.fixture
def fresh_reason() -> Iterator[None]:
    mn.netns_reason.cache_clear()
    yield
    mn.netns_reason.cache_clear()


def test_a_forged_variable_does_not_pass_for_the_namespace(
        monkeypatch: pytest.MonkeyPatch, fresh_reason: None) -> None:
    """Claiming the launcher's namespace from the namespace the process is really in."""
    own = mn.netns_id()
    monkeypatch.setenv(mn.ENV, json.dumps({"address": "10.99.0.1", "outer_netns": own,
                                           "outer_addresses": sorted(mn.local_addresses())}))
    reason = mn.netns_reason()
    assert reason is not None and "bash .ci/mooncake-real PYTHON test" in reason
    assert f"this process is in the launcher's own network namespace {own}" in reason
    assert "the private address 10.99.0.1 is not on an interface here" in reason
    assert mn.tier_host() == "127.0.0.1"


def test_the_launcher_refuses_bad_input_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert mn.main(["--address", "127.0.0.1", "--", "true"]) == 2
    assert mn.main(["--address", "no", "--", "true"]) == 2
    assert mn.main([]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == ["mooncake-netns: --address '127.0.0.1' is not a non-loopback IPv4 address",
                   "mooncake-netns: --address 'no' is not a non-loopback IPv4 address",
                   f"usage: python -m {mn.MODULE} [--address A] -- COMMAND [ARG ...]"]


def test_without_unshare_the_command_runs_and_the_tier_says_why(tmp_path: Path) -> None:
    """No namespace can be made: the command still runs, and the reason reaches the tier."""
    (tmp_path / "python").symlink_to(sys.executable)
    env = {**os.environ, "PATH": str(tmp_path)}
    env.pop(mn.ENV, None)
    done = subprocess.run(
        [sys.executable, "-m", mn.MODULE, "--", "python", "-c",
         "from kvreg.realhw.mooncake_netns import netns_reason; print(netns_reason())"],
        capture_output=True, text=True, timeout=120, env=env, check=False)
    assert done.returncode == 0, done.stderr
    assert "it could not make one: unshare (util-linux) is not installed" in done.stdout
    assert "running the command without one" in done.stderr
