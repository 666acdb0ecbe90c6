"""``kvreg`` command lines for the tests, each in a process of its own, without paying
interpreter start-up and the torch import per command line.

A test that runs the CLI wants what a user's ``kvreg ...`` does: a fresh process, its exit
status, stdout and stderr, nothing shared with the test's process or an earlier run. Most
of such a run's CPU went to importing torch (the supervisor imports it before its first
worker), once per command line. Here a server process (one per pytest process, started on
first use) imports torch and nothing of kvreg's run machinery, then forks one child per
command line: the child takes the run's working folder, environment, argv and standard
streams (stdout and stderr are files, stdin is empty, as ``subprocess.run`` with captured
output gives a program no terminal either), runs the console script's ``main`` as the
script would, runs the exit handlers and flushes, and exits with the status the script's
``sys.exit`` would give. The server itself never runs a command, so every child starts from
the same state: a fresh interpreter with torch imported. What this leaves out is the start
of the interpreter and the script itself; the tests of those (pipes, signals, ``python
-m``, the entry point) start real processes (tests/cli/test_cli_pipes_progress.py,
tests/isolation/test_interrupt.py, tests/infra/test_wheel_contents.py).
"""

from __future__ import annotations

import atexit
import io
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
from pathlib import Path
from typing import IO, Any

__all__ = ["kvreg_argv0", "run_kvreg_process"]


def kvreg_argv0() -> str:
    """The console script beside this interpreter (``-m`` when it is not installed)."""
    script = Path(sys.executable).with_name("kvreg")
    return str(script) if script.exists() else "-m"


# -- the server (this file run as a script) ------------------------------------------------
def _stream(fd: int, *, line_buffering: bool, write_through: bool) -> io.TextIOWrapper:
    raw = io.FileIO(fd, "w", closefd=False)
    return io.TextIOWrapper(io.BufferedWriter(raw), encoding="utf-8",
                            errors="backslashreplace" if fd == 2 else "strict",
                            line_buffering=line_buffering, write_through=write_through)


def _exit_code(code: Any) -> int:
    """What ``sys.exit(code)`` makes the process's status (printing a non-int code)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _child(request: dict[str, Any]) -> None:
    """Become the command line's process; never returns."""
    code = 1
    try:
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
        unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
        # (sys.__stdout__ and the like still wrap fds 0-2, which now lead to these files)
        sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
        sys.stdout = _stream(1, line_buffering=False, write_through=unbuffered)
        # non-interactive stderr is line-buffered since Python 3.9
        sys.stderr = _stream(2, line_buffering=True, write_through=unbuffered)
        argv0 = request["argv0"]
        sys.argv = [argv0 if argv0 != "-m" else "-m", *request["args"]]
        from kvreg.harness.cli.main import main

        try:
            code = _exit_code(main())
        except SystemExit as exc:
            code = _exit_code(exc.code)
        except BaseException:       # as the interpreter reports an uncaught exception
            traceback.print_exc()
            code = 1
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BrokenPipeError:
                code = 120
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code)


def _serve() -> None:
    import torch.cuda  # noqa: F401  (what every `kvreg run` imports; the point of the server)

    # a console script's sys.path[0] is the script's folder, not this file's
    argv0 = kvreg_argv0()
    sys.path[0] = str(Path(argv0).parent) if argv0 != "-m" else ""
    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    for line in requests:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request)
        replies.write(f"{pid}\n".encode())
        replies.flush()
        _, status = os.waitpid(pid, 0)
        replies.write(f"{os.waitstatus_to_exitcode(status)}\n".encode())
        replies.flush()


# -- the client (imported by tests/helpers/kvreg_cli.py) --------------------------------------
class _Server:
    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.lock = threading.Lock()

    def _ensure(self) -> subprocess.Popen[bytes]:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen([sys.executable, __file__], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, bufsize=0)
        return self.proc

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def _line(self, stream: IO[bytes], deadline: float | None) -> str:
        import time

        if deadline is not None:
            ready, _, _ = select.select([stream], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise TimeoutError
        line = stream.readline()
        if not line:
            raise RuntimeError("the kvreg command server exited")
        return line.decode().strip()

    def run(self, args: list[str], env: dict[str, str], cwd: Path,
            timeout: float) -> subprocess.CompletedProcess[str]:
        import time

        with self.lock, tempfile.TemporaryDirectory(prefix="kvreg-cli-") as tmp:
            out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
            proc = self._ensure()
            assert proc.stdin is not None and proc.stdout is not None
            request = {"args": args, "env": env, "cwd": str(cwd), "argv0": kvreg_argv0(),
                       "stdout": str(out), "stderr": str(err)}
            proc.stdin.write((json.dumps(request) + "\n").encode())
            pid = int(self._line(proc.stdout, None))
            try:
                status = int(self._line(proc.stdout, time.monotonic() + timeout))
            except TimeoutError:
                os.kill(pid, signal.SIGKILL)
                self._line(proc.stdout, None)
                raise subprocess.TimeoutExpired(args, timeout) from None
            return subprocess.CompletedProcess(
                [kvreg_argv0(), *args], status,
                out.read_text(errors="backslashreplace") if out.exists() else "",
                err.read_text(errors="backslashreplace") if err.exists() else "")


_SERVER = _Server()
atexit.register(_SERVER.close)


def run_kvreg_process(args: list[str], *, env: dict[str, str], cwd: Path,
                      timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """``kvreg ARGS`` in a process of its own (forked from the server); as
    ``subprocess.run(..., capture_output=True, text=True)`` returns it."""
    return _SERVER.run(list(args), env, cwd, timeout)


if __name__ == "__main__":
    _serve()
