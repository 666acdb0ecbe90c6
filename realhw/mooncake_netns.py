"""A private network namespace for the ``mooncake-real`` tier: its processes reach nothing else.

Mooncake 0.3.13.post1 listens on wildcard addresses whatever it is told: the master's HTTP
metadata server binds 0.0.0.0 despite ``--http_metadata_server_host``, the engine's RPC socket
binds ``INADDR_ANY`` (``findAvailableTcpPort``, mooncake-transfer-engine/src/
transfer_metadata_plugin.cpp) and the tcp transport's acceptor ``in6addr_any``; the engine
announces the first non-loopback interface address (``findLocalIpAddresses``, same file) unless
``MC_TCP_BIND_ADDRESS`` names one (transfer_engine_impl.cpp) [verified, and seen in
/proc/net/tcp{,6} here]. On a host that is the machine's own interface. So the tier runs only in
a network namespace this module makes: ``lo`` up and a veth pair whose one IPv4 address
(``10.77.0.1/24`` by default, no IPv6 link-local) exists there and nowhere else; the engine
is told to announce it::

    python -m kvreg.realhw.mooncake_netns [--address 10.77.0.1] -- COMMAND [ARG ...]

As root it uses ``unshare -n``; otherwise ``unshare -rn`` (a user namespace). Where neither
works the command still runs, with :data:`ENV_UNAVAILABLE` saying why, so the tier skips with
that reason. :func:`netns_reason` is what every real Mooncake start asks first. After the
command exits, a process still in the namespace is stopped by its pid and the run fails.
The socket readers (:func:`process_sockets`, :func:`foreign_sockets`) are what the tier's
hygiene test holds the real master and stores to.
"""

from __future__ import annotations

import argparse
import ctypes
import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

__all__ = ["ENV", "ENV_UNAVAILABLE", "LAUNCHER", "Sock", "foreign_sockets", "local_addresses",
           "namespace_info", "namespace_problems", "netns_id", "netns_reason",
           "parse_fib_trie", "parse_if_inet6", "parse_ip_table", "process_sockets", "tier_host"]

ENV = "KVREG_MOONCAKE_NETNS"                         # JSON, set inside the namespace
ENV_UNAVAILABLE = "KVREG_MOONCAKE_NETNS_UNAVAILABLE"  # why no namespace could be made
LAUNCHER = "bash .ci/mooncake-real PYTHON test"
MODULE = "kvreg.realhw.mooncake_netns"
DEFAULT_ADDRESS = "10.77.0.1"
PREFIX = 24
VETH = ("kvreg0", "kvreg1")
LOOPBACK = "127.0.0.1"
_STOP_WAIT = 5.0


# ---------------------------------------------------------------- what the kernel says

def netns_id(pid: int | str = "self") -> str | None:
    """``net:[inode]`` of the process's network namespace; None when it cannot be read (a
    sandbox may deny /proc/1/ns/net even to root)."""
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


def parse_fib_trie(text: str) -> set[str]:
    """The IPv4 addresses the kernel answers for (``/32 host LOCAL`` in /proc/net/fib_trie)."""
    found: set[str] = set()
    last = ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("|--"):
            last = stripped[3:].strip()
        elif stripped.startswith("/32 host LOCAL") and last:
            found.add(last)
    return found


def parse_if_inet6(text: str) -> set[str]:
    """The IPv6 addresses of /proc/net/if_inet6 (32 hex digits, network order)."""
    found: set[str] = set()
    for line in text.splitlines():
        fields = line.split()
        if fields and len(fields[0]) == 32:
            found.add(str(ipaddress.IPv6Address(bytes.fromhex(fields[0]))))
    return found


def local_addresses(pid: int | str = "self") -> set[str]:
    """Every address of every interface of ``pid``'s network namespace (its /proc/net view)."""
    found: set[str] = set()
    for name, parse in (("fib_trie", parse_fib_trie), ("if_inet6", parse_if_inet6)):
        try:
            with open(f"/proc/{pid}/net/{name}") as f:
                found |= parse(f.read())
        except OSError:
            continue
    return found


def _is_loopback(address: str) -> bool:
    return ipaddress.ip_address(address).is_loopback


# ---------------------------------------------------------------- the namespace's identity

def namespace_info() -> dict[str, Any] | None:
    """What the launcher recorded (``address``, ``outer_netns``, ``outer_addresses``); None
    outside a namespace it made."""
    raw = os.environ.get(ENV)
    if not raw:
        return None
    try:
        info = json.loads(raw)
    except ValueError:
        return None
    return info if isinstance(info, dict) else None


def namespace_problems(info: dict[str, Any]) -> list[str]:
    """Why this process is not in a private namespace like the launcher's (empty: it is)."""
    problems: list[str] = []
    own = netns_id()
    address = str(info.get("address", ""))
    outer = set(info.get("outer_addresses", []))
    if own is None:
        return ["/proc/self/ns/net cannot be read"]
    if own == info.get("outer_netns"):
        problems.append(f"this process is in the launcher's own network namespace {own}")
    if own == netns_id(1):
        problems.append(f"this process shares PID 1's network namespace {own}")
    here = local_addresses()
    if address not in here:
        problems.append(f"the private address {address} is not on an interface here")
    extra = sorted(a for a in here if a != address and not _is_loopback(a))
    if extra:
        problems.append(f"interfaces here carry other addresses: {', '.join(extra)}")
    shared = sorted(a for a in here & (outer | local_addresses(1)) if not _is_loopback(a))
    if shared:
        problems.append(f"addresses here exist outside too: {', '.join(shared)}")
    return problems


@cache
def netns_reason() -> str | None:
    """None inside a private namespace this module made; else why the real Mooncake processes
    must not start here (the reason names the launcher). Cached: a process's network
    namespace does not change."""
    hint = (f"the real Mooncake master and store listen on every interface; they run only in "
            f"the private network namespace that `{LAUNCHER}` makes")
    info = namespace_info()
    if info is None:
        unavailable = os.environ.get(ENV_UNAVAILABLE)
        return hint + (f" (it could not make one: {unavailable})" if unavailable else "")
    problems = namespace_problems(info)
    return f"{hint}: {'; '.join(problems)}" if problems else None


def tier_host() -> str:
    """The address the tier's master and stores use: the namespace's private address inside
    it, loopback elsewhere (stand-in binaries only: the real ones never start there)."""
    info = namespace_info()
    if info is not None and netns_reason() is None:
        return str(info["address"])
    return LOOPBACK


# ---------------------------------------------------------------- sockets

@dataclass(frozen=True)
class Sock:
    """One socket of a process: ``proto`` tcp/tcp6/udp/udp6/raw/raw6 (with addresses; state
    ``BOUND`` for one bound but neither listening nor connected), unix, netlink, packet,
    ``unbound`` (an IP socket with no address yet: it carries no traffic) or ``unknown``."""

    pid: int
    inode: int
    proto: str
    local: str = ""
    local_port: int = 0
    remote: str = ""
    remote_port: int = 0
    state: str = ""

    def __str__(self) -> str:
        where = f" {self.local}:{self.local_port} -> {self.remote}:{self.remote_port}" \
            if self.local else ""
        return f"pid {self.pid} {self.proto} socket:[{self.inode}]{where} {self.state}".rstrip()


_TCP_STATES = {"01": "ESTABLISHED", "02": "SYN_SENT", "03": "SYN_RECV", "04": "FIN_WAIT1",
               "05": "FIN_WAIT2", "06": "TIME_WAIT", "07": "CLOSE", "08": "CLOSE_WAIT",
               "09": "LAST_ACK", "0A": "LISTEN", "0B": "CLOSING"}


def _hex_address(text: str) -> tuple[str, int]:
    addr, port = text.split(":")
    raw = bytes.fromhex(addr)
    # the kernel prints each 32-bit word in host (little-endian) order
    raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    ip = ipaddress.ip_address(raw)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return str(ip), int(port, 16)


def parse_ip_table(text: str, proto: str) -> dict[int, tuple[str, int, str, int, str]]:
    """/proc/net/{tcp,tcp6,udp,udp6,raw,raw6}: inode -> (local, port, remote, port, state)."""
    rows: dict[int, tuple[str, int, str, int, str]] = {}
    for line in text.splitlines()[1:]:
        f = line.split()
        if len(f) < 10:
            continue
        local, lport = _hex_address(f[1])
        remote, rport = _hex_address(f[2])
        state = _TCP_STATES.get(f[3], f[3]) if proto.startswith("tcp") else f[3]
        rows[int(f[9])] = (local, lport, remote, rport, state)
    return rows


def _inode_column(text: str, column: int) -> set[int]:
    out = set()
    for line in text.splitlines()[1:]:
        f = line.split()
        if len(f) > column and f[column].isdigit():
            out.add(int(f[column]))
    return out


_SYS_PIDFD_GETFD = 438      # x86_64 and aarch64 (Linux 5.6)
_KINDS = {socket.SOCK_STREAM: "tcp", socket.SOCK_DGRAM: "udp", socket.SOCK_RAW: "raw"}


def _still_open(pid: int, fd: int, inode: int) -> bool:
    try:
        return os.readlink(f"/proc/{pid}/fd/{fd}") == f"socket:[{inode}]"
    except OSError:
        return False


def _unlisted(pid: int, inode: int, fd: int) -> Sock | None:
    """A socket on no /proc/net table: an IP socket bound but not listening (the engine keeps
    its RPC port so) or not bound at all. Its name is read through a copy of the descriptor
    (pidfd_getfd(2)); anything else, or a copy refused, is ``unknown``. None: the process
    closed it after its descriptors were listed (a served HTTP request, say), or the number
    now holds another file."""
    unknown = Sock(pid, inode, "unknown")
    try:
        pidfd = os.pidfd_open(pid)
    except (OSError, AttributeError):
        return unknown if _still_open(pid, fd, inode) else None
    try:
        copy = int(ctypes.CDLL(None, use_errno=True).syscall(_SYS_PIDFD_GETFD, pidfd, fd, 0))
        if copy < 0:
            return unknown if _still_open(pid, fd, inode) else None
        if os.fstat(copy).st_ino != inode:
            os.close(copy)
            return None
        with socket.socket(fileno=copy) as sock:
            if sock.family not in (socket.AF_INET, socket.AF_INET6) or \
                    sock.type not in _KINDS:
                return unknown
            host, port = sock.getsockname()[:2]
            if ipaddress.ip_address(host).is_unspecified and port == 0:
                return Sock(pid, inode, "unbound")
            proto = _KINDS[sock.type] + ("6" if sock.family == socket.AF_INET6 else "")
            unspecified = "0.0.0.0" if sock.family == socket.AF_INET else "::"
            return Sock(pid, inode, proto, host, port, unspecified, 0, "BOUND")
    except OSError:
        return unknown
    finally:
        os.close(pidfd)


def process_sockets(pid: int) -> list[Sock]:
    """Every socket ``pid`` holds, with its addresses (read from /proc; no psutil)."""
    inodes: dict[int, int] = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.setdefault(int(target[8:-1]), int(fd))
    tables: dict[str, dict[int, tuple[str, int, str, int, str]]] = {}
    for proto in ("tcp", "tcp6", "udp", "udp6", "raw", "raw6"):
        try:
            with open(f"/proc/{pid}/net/{proto}") as f:
                tables[proto] = parse_ip_table(f.read(), proto)
        except OSError:
            tables[proto] = {}
    other: dict[str, set[int]] = {}
    for proto, column in (("unix", 6), ("netlink", 9), ("packet", 8)):
        try:
            with open(f"/proc/{pid}/net/{proto}") as f:
                other[proto] = _inode_column(f.read(), column)
        except OSError:
            other[proto] = set()
    socks = []
    for inode in sorted(inodes):
        for proto, table in tables.items():
            if inode in table:
                socks.append(Sock(pid, inode, proto, *table[inode]))
                break
        else:
            kind = next((p for p, known in other.items() if inode in known), None)
            sock = Sock(pid, inode, kind) if kind else _unlisted(pid, inode, inodes[inode])
            if sock is not None:
                socks.append(sock)
    return socks


def foreign_sockets(socks: Iterable[Sock], allowed: Iterable[str], *,
                    wildcard_ok: bool) -> list[str]:
    """Each socket that binds or talks to an address outside ``allowed`` (loopback always
    allowed), a packet socket (below addresses), or one this reader cannot place.
    A wildcard bind passes only with ``wildcard_ok``: where every interface address of the
    namespace is itself allowed."""
    ok = set(allowed)
    bad = []
    for s in socks:
        if s.proto in ("unix", "netlink", "unbound"):
            continue
        if s.proto in ("packet", "unknown"):
            bad.append(f"{s}: a {s.proto} socket" if s.proto == "packet" else
                       f"{s}: not an IP, unix, netlink or packet socket")
            continue
        for role, address in (("bound to", s.local), ("connected to", s.remote)):
            ip = ipaddress.ip_address(address)
            if ip.is_unspecified:
                if role == "bound to" and not wildcard_ok:
                    bad.append(f"{s}: bound to every interface")
                continue
            if not ip.is_loopback and address not in ok:
                bad.append(f"{s}: {role} {address}")
    return bad


# ---------------------------------------------------------------- the launcher

def _run(cmd: Sequence[str]) -> str | None:
    """None when the command succeeds, else its error in one line."""
    try:
        done = subprocess.run(list(cmd), capture_output=True, text=True, timeout=30,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{' '.join(cmd)}: {exc}"
    if done.returncode != 0:
        err = " ".join((done.stderr or done.stdout).split()) or f"exit {done.returncode}"
        return f"{' '.join(cmd)}: {err}"
    return None


def _outside(address: str, command: list[str]) -> int:
    outer = sorted(local_addresses())
    if address in outer:
        print(f"mooncake-netns: {address} is an address of this machine; pick another with "
              "--address", file=sys.stderr)
        return 2
    os.environ[ENV + "_OUTER"] = json.dumps({"outer_netns": netns_id(),
                                             "outer_addresses": outer})
    os.environ.pop(ENV, None)
    errors = []
    unshare = shutil.which("unshare")
    if unshare is None:
        errors.append("unshare (util-linux) is not installed")
    else:
        variants = ([[unshare, "-n"]] if os.geteuid() == 0 else []) + [[unshare, "-rn"]]
        for variant in variants:
            err = _run([*variant, "true"])
            if err is None:
                inner = [*variant, sys.executable, "-m", MODULE, "--inside", "--address",
                         address, "--", *command]
                os.execvp(inner[0], inner)
            errors.append(err)
    os.environ[ENV_UNAVAILABLE] = "; ".join(errors)
    print(f"mooncake-netns: no private network namespace ({os.environ[ENV_UNAVAILABLE]}); "
          "running the command without one: the real Mooncake processes will not start",
          file=sys.stderr)
    os.execvp(command[0], command)
    return 127   # not reached


def _setup(address: str) -> str | None:
    ip = shutil.which("ip")
    if ip is None:
        return "ip (iproute2) is not installed"
    a, b = VETH
    for cmd in ([ip, "link", "set", "lo", "up"],
                [ip, "link", "add", a, "type", "veth", "peer", "name", b],
                [ip, "link", "set", a, "addrgenmode", "none"],
                [ip, "link", "set", b, "addrgenmode", "none"],
                [ip, "addr", "add", f"{address}/{PREFIX}", "dev", a],
                [ip, "link", "set", a, "up"], [ip, "link", "set", b, "up"]):
        err = _run(cmd)
        if err is not None:
            return err
    return None


def _in_namespace(own: str) -> list[int]:
    """The pids, other than this one, in the network namespace ``own``."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid() and netns_id(entry) == own:
            pids.append(int(entry))
    return pids


def _stop(pid: int) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + _STOP_WAIT
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)


def _inside(address: str, command: list[str]) -> int:
    outer = json.loads(os.environ.pop(ENV + "_OUTER", "{}"))
    err = _setup(address)
    info = {"address": address, **outer}
    problems = [err] if err else namespace_problems(info)
    if problems:
        os.environ[ENV_UNAVAILABLE] = "; ".join(problems)
        print(f"mooncake-netns: the namespace is not private ({'; '.join(problems)})",
              file=sys.stderr)
    else:
        os.environ[ENV] = json.dumps({**info, "netns": netns_id()})
        os.environ["MC_TCP_BIND_ADDRESS"] = address   # what the engine announces
    try:
        proc = subprocess.Popen(command)
    except OSError as exc:
        print(f"mooncake-netns: cannot run {command[0]}: {exc}", file=sys.stderr)
        return 127

    def forward(signum: int, _frame: object) -> None:
        proc.send_signal(signum)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, forward)
    rc = proc.wait()
    own = netns_id()
    left = _in_namespace(own) if own else []
    for pid in left:
        _stop(pid)
    if left:
        print(f"mooncake-netns: stopped {len(left)} process(es) left in the namespace: "
              f"{', '.join(map(str, left))}", file=sys.stderr)
        return rc or 1
    return rc if rc >= 0 else 128 - rc


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    command = args[args.index("--") + 1:] if "--" in args else []
    parser = argparse.ArgumentParser(
        prog=f"python -m {MODULE}",
        description="run COMMAND in a fresh network namespace: lo up and a veth pair whose "
                    "one address exists only there (the mooncake-real tier)")
    parser.add_argument("--address", default=DEFAULT_ADDRESS,
                        help=f"the namespace's private IPv4 address (default {DEFAULT_ADDRESS})")
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    opts = parser.parse_args(args[:args.index("--")] if "--" in args else args)
    try:
        ip = ipaddress.ip_address(opts.address)
    except ValueError:
        ip = None
    if not isinstance(ip, ipaddress.IPv4Address) or ip.is_loopback or ip.is_unspecified:
        print(f"mooncake-netns: --address {opts.address!r} is not a non-loopback IPv4 address",
              file=sys.stderr)
        return 2
    if not command:
        print(f"usage: python -m {MODULE} [--address A] -- COMMAND [ARG ...]", file=sys.stderr)
        return 2
    return _inside(opts.address, command) if opts.inside else _outside(opts.address, command)


if __name__ == "__main__":
    sys.exit(main())
