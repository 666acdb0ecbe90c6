"""Ctrl-C on ``kvreg run``: exit 130, no traceback, and a complete report: the scenarios done
so far keep their verdicts, the one running and the rest are ``skip`` with the reason."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from ..helpers.kvreg_cli import cli_env, kvreg_command
from ..helpers.paths import isolation_spec
from ..helpers.scenario_text import ONE_CHUNK, THREE_CHUNKS, scenario_file


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is gone for our purpose: it runs nothing
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def test_ctrl_c_writes_the_complete_report_and_exits_130(tmp_path: Path) -> None:
    folder = tmp_path / "scenarios"
    folder.mkdir()
    scenario_file(folder, ONE_CHUNK.replace("one-chunk", "a-small"), THREE_CHUNKS,
                  ONE_CHUNK.replace("one-chunk", "z-small"))
    marker, report = tmp_path / "hanging.pid", tmp_path / "report.json"
    report.write_text("previous report\n")
    env = {**cli_env(), "KVREG_TEST_MARKER": str(marker)}
    # started as from a terminal, with Ctrl-C's default action: an ignored SIGINT is inherited
    # (a test earlier in this worker may have left it ignored), and Python then never raises
    # KeyboardInterrupt (a shuffled CI order ran the whole catalog past the signal)
    proc = subprocess.Popen([*kvreg_command(), "run", str(folder), "--style", "generic",
                             "--impl", isolation_spec("register_hangs_when_chunked"),
                             "--teardown", isolation_spec("teardown"), "--json", str(report)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        # the run is in its second scenario once the implementation wrote the marker
        while not marker.exists() or not marker.read_text():
            assert proc.poll() is None, proc.communicate()
            # meanwhile a reader sees the previous report or nothing new: never half a file
            assert report.read_text() == "previous report\n"
            time.sleep(0.05)
        worker = int(marker.read_text())
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert "interrupted (Ctrl-C)" in err
    doc = json.loads(report.read_text())
    assert doc["summary"] == {"total": 3, "passed": 1, "failed": 0, "errors": 0, "skipped": 2}
    verdicts = [(s["id"], s["verdict"], s.get("reason")) for s in doc["scenarios"]]
    assert verdicts == [
        ("pool/a-small", "pass", None),
        ("pool/three-chunks", "skip", "interrupted (Ctrl-C) while this scenario ran"),
        ("pool/z-small", "skip",
         "not run: the run was interrupted (Ctrl-C) before this scenario started")]
    # the table went to stdout as well, and the worker did not outlive kvreg
    assert "pool/a-small" in out and out.rstrip().endswith("1 passed, 0 failed, 2 skipped")
    assert not _alive(worker)


def test_a_killed_kvreg_takes_its_worker_with_it(tmp_path: Path) -> None:
    """Even SIGKILL of kvreg (no chance to clean up) ends an endless implementation."""
    scenario_file(tmp_path, THREE_CHUNKS)
    marker = tmp_path / "hanging.pid"
    env = {**cli_env(), "KVREG_TEST_MARKER": str(marker)}
    proc = subprocess.Popen([*kvreg_command(), "run", str(tmp_path), "--style", "generic",
                             "--impl", isolation_spec("register_hangs_when_chunked"),
                             "--teardown", isolation_spec("teardown")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        while not marker.exists() or not marker.read_text():
            assert proc.poll() is None
            time.sleep(0.05)
        worker = int(marker.read_text())
        proc.kill()
    finally:
        proc.kill()
        proc.wait()
    for _ in range(6000):           # the kernel delivers the worker's SIGKILL at once
        if not _alive(worker):
            break
        time.sleep(0.05)
    assert not _alive(worker)
