"""MasterProcess without Mooncake installed: stand-in binaries that listen, exit, or hang.

The real-store tier must never hang and never leave a process or a port behind
(issue: "a master that does not start → a clear error naming the log, never a hang").
These run everywhere; tests/mooncake_real repeats the leak proof with the real binary.
"""

from __future__ import annotations

import os
import socket
import stat
import sys
import types
from pathlib import Path

import pytest

from kvreg.realhw.mooncake_master import MasterFailed, MasterProcess, port_open

LISTENER = f"""#!{sys.executable}
import socket, sys, time
ports = [int(a.split("=", 1)[1]) for a in sys.argv[1:]
         if a.startswith(("--rpc_port=", "--http_metadata_server_port="))]
host = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--rpc_address=")][0]
socks = []
for p in ports:
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, p)); s.listen(); socks.append(s)
print("listening", ports, flush=True)
time.sleep(600)
"""
EXITS = f"#!{sys.executable}\nimport sys\nprint('bad flag: no such option', flush=True)\n" \
        "sys.exit(3)\n"
HANGS = f"#!{sys.executable}\nimport time\ntime.sleep(600)\n"


def _script(tmp: Path, name: str, text: str) -> str:
    path = tmp / name
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _bindable(port: int, host: str = "127.0.0.1") -> bool:
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


def test_start_waits_for_both_ports_and_stop_leaves_nothing(tmp_path: Path) -> None:
    m = MasterProcess(binary=_script(tmp_path, "listener", LISTENER), log_dir=tmp_path)
    try:
        m.start()
        assert port_open(m.rpc_port, host=m.host) and port_open(m.http_port, host=m.host)
        assert len({m.rpc_port, m.http_port, m.metrics_port}) == 3
        assert m.address == f"{m.host}:{m.rpc_port}"
        assert m.metadata_url == f"http://{m.host}:{m.http_port}/metadata"
        assert f"--rpc_address={m.host}" in m.command()
    finally:
        pid = m.pid
        m.stop()
    assert pid is not None and _gone(pid)
    assert _bindable(m.rpc_port, m.host) and _bindable(m.http_port, m.host)


def test_outside_the_namespace_the_host_is_loopback(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from kvreg.realhw import mooncake_netns

    monkeypatch.delenv(mooncake_netns.ENV, raising=False)
    mooncake_netns.netns_reason.cache_clear()
    try:
        m = MasterProcess(binary=_script(tmp_path, "listener", LISTENER), log_dir=tmp_path)
        assert m.host == "127.0.0.1"
        assert {"--http_metadata_server_host=127.0.0.1", "--metrics_host=127.0.0.1"} \
            <= set(m.command())
    finally:
        mooncake_netns.netns_reason.cache_clear()


def _as_the_real_binary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reason: str | None
                        ) -> MasterProcess:
    """A stand-in listener that ``find_master`` reports as Mooncake's own binary."""
    from kvreg.realhw import mooncake_master

    listener = _script(tmp_path, "mooncake_master", LISTENER)
    monkeypatch.setattr(mooncake_master, "find_master", lambda name="": listener)
    monkeypatch.setattr(mooncake_master, "netns_reason", lambda: reason)
    return MasterProcess(log_dir=tmp_path, host="127.0.0.1")


def test_the_real_binary_never_starts_outside_the_namespace(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    m = _as_the_real_binary(tmp_path, monkeypatch, "they run only in the namespace that "
                            "`bash .ci/mooncake-real PYTHON test` makes")
    with pytest.raises(MasterFailed, match=r"mooncake_master not started: .*\.ci/mooncake-real"):
        m.start()
    assert m.proc is None and not list(tmp_path.glob("*.log"))    # nothing was spawned


def test_inside_the_namespace_the_real_binary_starts(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    m = _as_the_real_binary(tmp_path, monkeypatch, None)
    try:
        m.start()
        assert m.alive()
    finally:
        m.stop()
    assert m.pid is not None and _gone(m.pid)


def test_a_stand_in_binary_is_not_held_to_the_namespace(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from kvreg.realhw import mooncake_master

    monkeypatch.setattr(mooncake_master, "netns_reason", lambda: "outside")
    m = MasterProcess(binary=_script(tmp_path, "listener", LISTENER), log_dir=tmp_path)
    try:
        m.start()
        assert m.alive()
    finally:
        m.stop()
    assert m.stop() is not None        # a second stop is harmless


def test_a_master_that_exits_fails_naming_its_log(tmp_path: Path) -> None:
    m = MasterProcess(binary=_script(tmp_path, "exits", EXITS), log_dir=tmp_path)
    with pytest.raises(MasterFailed, match=r"exited with 3; log: .*mooncake_master-") as err:
        m.start()
    assert "bad flag" in str(err.value)           # the log's tail is in the message
    assert m.pid is not None and _gone(m.pid)


def test_a_master_that_never_listens_times_out_and_is_killed(tmp_path: Path) -> None:
    m = MasterProcess(binary=_script(tmp_path, "hangs", HANGS), log_dir=tmp_path,
                      start_timeout=1.0)
    with pytest.raises(MasterFailed, match=r"did not listen .* within 1 s; log: "):
        m.start()
    assert m.pid is not None and _gone(m.pid)


def test_a_missing_binary_is_a_clear_error(tmp_path: Path) -> None:
    m = MasterProcess(binary=str(tmp_path / "no-such-master"), log_dir=tmp_path)
    with pytest.raises(MasterFailed, match=r"cannot start .*no-such-master"):
        m.start()
    assert m.proc is None


def test_a_master_dying_mid_test_is_reported_with_its_log(tmp_path: Path) -> None:
    m = MasterProcess(binary=_script(tmp_path, "listener", LISTENER), log_dir=tmp_path)
    try:
        m.start()
        assert m.proc is not None
        m.proc.kill()
        m.proc.wait(10)
        with pytest.raises(MasterFailed, match=r"exited with -9; log: .*\n.*listening"):
            m.check_alive()
    finally:
        m.stop()


def test_a_missing_wheel_is_a_reason_naming_the_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from kvreg.realhw import mooncake_master

    monkeypatch.setattr(mooncake_master, "package_version", lambda: None)
    reason = mooncake_master.missing_reason()
    assert reason is not None
    assert "pip install mooncake-transfer-engine-non-cuda==0.3.13.post1" in reason
    assert "libibverbs1 librdmacm1 libnuma1" in reason


def test_a_missing_binary_is_a_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    from kvreg.realhw import mooncake_master

    monkeypatch.setattr(mooncake_master, "package_version", lambda: "0.3.13.post1")
    monkeypatch.setattr(mooncake_master, "find_master", lambda name="": None)
    pkg, store = types.ModuleType("mooncake"), types.ModuleType("mooncake.store")
    pkg.store = store  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "mooncake", pkg)          # importable stand-ins
    monkeypatch.setitem(sys.modules, "mooncake.store", store)
    assert mooncake_master.missing_reason() == (
        "the mooncake_master binary is not in the package nor on PATH")


def test_with_everything_installed_the_namespace_is_the_reason(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from kvreg.realhw import mooncake_master

    monkeypatch.setattr(mooncake_master, "package_version", lambda: "0.3.13.post1")
    monkeypatch.setattr(mooncake_master, "find_master", lambda name="": "/bin/true")
    pkg, store = types.ModuleType("mooncake"), types.ModuleType("mooncake.store")
    pkg.store = store  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "mooncake", pkg)
    monkeypatch.setitem(sys.modules, "mooncake.store", store)
    monkeypatch.setattr(mooncake_master, "netns_reason", lambda: "outside the namespace")
    assert mooncake_master.missing_reason() == "outside the namespace"
    monkeypatch.setattr(mooncake_master, "netns_reason", lambda: None)
    assert mooncake_master.missing_reason() is None
