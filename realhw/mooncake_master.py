"""A real ``mooncake_master`` on free ports of the tier's address, stopped by its pid.

The ``mooncake-transfer-engine-non-cuda`` wheel ships the master binary (``mooncake/
mooncake_master``, also the ``mooncake_master`` console script, which ``execv``s it so
the pid stays the binary's) and the store binding ``mooncake.store``. With
``--enable_http_metadata_server`` the master embeds the metadata server a tcp store needs,
so one process is the whole deployment (docs/mooncake-verbs.md §7).

The real binaries listen on every interface whatever their flags say (the HTTP metadata
server binds 0.0.0.0), so they start only inside the private network namespace
:mod:`.mooncake_netns` makes: elsewhere :func:`missing_reason` says so and
:meth:`MasterProcess.start` refuses them. There the address is the namespace's own
(:func:`~.mooncake_netns.tier_host`); stand-in binaries elsewhere get 127.0.0.1.

Every wait has a timeout; a master that exits or never listens raises
:class:`MasterFailed` naming its log; :meth:`MasterProcess.stop` sends SIGTERM, then
SIGKILL, to the pid it started and nothing else. Nothing heavy is imported at load.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from .mooncake_netns import netns_reason, tier_host

__all__ = ["PACKAGE", "ClientProcess", "MasterFailed", "MasterProcess", "find_master", "free_port",
           "missing_reason", "package_version", "port_open"]

PACKAGE = "mooncake-transfer-engine-non-cuda"
_PACKAGES = (PACKAGE, "mooncake-transfer-engine")
LOOPBACK = "127.0.0.1"


class MasterFailed(RuntimeError):
    """The master did not start or died; the message names its log file."""


def package_version() -> str | None:
    """The installed Mooncake wheel's version, None when neither wheel is installed."""
    for name in _PACKAGES:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def find_master(name: str = "mooncake_master") -> str | None:
    """The master (or ``mooncake_client``) binary inside the installed package, else one on
    PATH."""
    try:
        import importlib.util

        spec = importlib.util.find_spec("mooncake")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin:
        candidate = Path(spec.origin).parent / name
        if candidate.is_file():
            return str(candidate)
    return shutil.which(name)


def missing_reason() -> str | None:
    """Why the real store cannot run here (None when it can); import errors say which lib."""
    if package_version() is None:
        return (f"the Mooncake wheel is not installed (pip install {PACKAGE}==0.3.13.post1, "
                "after apt-get install libibverbs1 librdmacm1 libnuma1)")
    try:
        import mooncake.store  # noqa: F401
    except ImportError as exc:   # a missing libibverbs.so.1 etc. lands here
        return f"mooncake.store does not import ({exc})"
    if find_master() is None:
        return "the mooncake_master binary is not in the package nor on PATH"
    return netns_reason()


def _is_real(binary: str) -> bool:
    """``binary`` is Mooncake's own master or client (not a stand-in)."""
    real = {find_master(name) for name in ("mooncake_master", "mooncake_client")}
    return os.path.realpath(binary) in {os.path.realpath(b) for b in real if b}


def free_port(host: str = LOOPBACK) -> int:
    """A port no one listens on at this instant (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_open(port: int, timeout: float = 0.2, host: str = LOOPBACK) -> bool:
    """True when something accepts a TCP connection on ``host``'s port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


@dataclass
class MasterProcess:
    """One master process. ``start()`` returns once both its ports accept connections.

    ``lease_ttl_ms`` is the master's ``--default_kv_lease_ttl`` (default 10000): how long
    a read keeps an object from being removed. ``host`` is the address every port binds
    (the namespace's private one inside it).
    """

    lease_ttl_ms: int | None = None
    log_dir: Path | None = None
    binary: str | None = None
    extra_args: Sequence[str] = ()
    start_timeout: float = 30.0
    rpc_port: int = 0
    http_port: int = 0
    metrics_port: int = 0
    log_path: Path | None = None
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    host: str = field(default_factory=tier_host)

    name = "mooncake_master"

    @property
    def address(self) -> str:
        """``master_server_addr`` for ``setup``."""
        return f"{self.host}:{self.rpc_port}"

    @property
    def metadata_url(self) -> str:
        """``metadata_server`` for ``setup`` (the embedded HTTP metadata server)."""
        return f"http://{self.host}:{self.http_port}/metadata"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def command(self) -> list[str]:
        binary = self.binary or find_master()
        if binary is None:
            raise MasterFailed("the mooncake_master binary is not in the package nor on PATH")
        args = [binary, f"--rpc_port={self.rpc_port}", f"--rpc_address={self.host}",
                "--enable_http_metadata_server=true",
                f"--http_metadata_server_host={self.host}",
                f"--http_metadata_server_port={self.http_port}",
                f"--metrics_host={self.host}", f"--metrics_port={self.metrics_port}"]
        if self.lease_ttl_ms is not None:
            args.append(f"--default_kv_lease_ttl={int(self.lease_ttl_ms)}")
        return [*args, *self.extra_args]

    def start(self, attempts: int = 3) -> MasterProcess:
        """Start on fresh free ports; retries when a port was taken meanwhile. Mooncake's own
        binary starts only inside the tier's network namespace (MasterFailed elsewhere)."""
        if self.proc is not None:
            raise MasterFailed("this master is already started")
        if _is_real(self.command()[0]) and netns_reason() is not None:
            raise MasterFailed(f"{self.name} not started: {netns_reason()}")
        log_dir = self.log_dir or Path(tempfile.mkdtemp(prefix="kvreg-mooncake-"))
        last: MasterFailed | None = None
        for attempt in range(attempts):
            self.rpc_port, self.http_port, self.metrics_port = _three_ports(self.host)
            self.log_path = log_dir / f"{self.name}-{self.rpc_port}-{attempt}.log"
            command = self.command()
            with open(self.log_path, "wb") as log:
                try:
                    self.proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                                 stdin=subprocess.DEVNULL,
                                                 start_new_session=True)
                except OSError as exc:
                    raise MasterFailed(f"cannot start {command[0]}: {exc}") from exc
            try:
                self._wait_ready()
                return self
            except MasterFailed as exc:
                last = exc
                self.stop()
                if "Address already in use" not in self.log_text():
                    break
        assert last is not None
        raise last

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            self.check_alive()
            if all(port_open(p, host=self.host) for p in self.ready_ports()):
                return
            time.sleep(0.05)
        raise MasterFailed(f"{self.name} did not listen on "
                           f"{'/'.join(map(str, self.ready_ports()))} within "
                           f"{self.start_timeout:.0f} s; log: {self.log_path}")

    def ready_ports(self) -> tuple[int, ...]:
        return (self.rpc_port, self.http_port)

    def check_alive(self) -> None:
        """Raise MasterFailed (naming the log) when the process has exited."""
        if self.proc is None:
            raise MasterFailed("the master is not started")
        code = self.proc.poll()
        if code is not None:
            raise MasterFailed(f"{self.name} exited with {code}; log: {self.log_path}\n"
                               f"{self.log_tail()}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM the pid, SIGKILL after ``timeout``; returns the exit status (None: never
        started). Safe to call twice."""
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            try:
                os.kill(proc.pid, signal.SIGTERM)
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout)
            except ProcessLookupError:
                pass
        return proc.wait(timeout)

    def log_text(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")

    def log_tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def __enter__(self) -> MasterProcess:
        return self.start() if self.proc is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _three_ports(host: str) -> tuple[int, int, int]:
    """Three distinct free ports (held open together, so the kernel cannot repeat one)."""
    socks = []
    try:
        for _ in range(3):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        a, b, c = (int(s.getsockname()[1]) for s in socks)
        return a, b, c
    finally:
        for s in socks:
            s.close()


@dataclass
class ClientProcess(MasterProcess):
    """A standalone ``mooncake_client`` of ``master`` (tcp, its own shared-memory segment):
    what ``setup_dummy(mem_pool_size, local_buffer_size, client.address)`` connects to."""

    master: MasterProcess | None = None
    global_segment: str = "64MB"
    local_buffer: str = "16MB"
    name = "mooncake_client"

    def command(self) -> list[str]:
        binary = self.binary or find_master("mooncake_client")
        if binary is None or self.master is None:
            raise MasterFailed("mooncake_client: no binary in the package nor on PATH, or "
                               "no master given")
        return [binary, f"--port={self.rpc_port}", f"--host={self.host}",
                f"--master_server_address={self.master.address}",
                f"--metadata_server={self.master.metadata_url}",
                f"--global_segment_size={self.global_segment}",
                f"--local_buffer_size={self.local_buffer}", "--protocol=tcp",
                *self.extra_args]

    def ready_ports(self) -> tuple[int, ...]:
        return (self.rpc_port,)
