"""Run every test file of the suite in a pytest process of its own, one after another.

A test that passes in the whole suite but fails alone relies on something an earlier file left
behind: a fixture's setup done elsewhere, a module another file imported first, a cache it
warmed, memory it had not freed yet. This runs each file the README's test command collects
(``python -m pytest -n 2 -q``: its ini options, and the ``expensive_property`` tests conftest.py
deselects stay deselected) with that command's options minus ``-n`` -- ``python -m pytest -q
-p no:cacheprovider FILE`` (no cache, so no run reads what an earlier one wrote) -- under a
per-file time limit, and prints one line per file and a summary. Exit status 0 when every file
passes alone, 1 when any fails, errors or runs out of time, 2 on bad input. Usage (from the
repository root; a run over the whole suite takes longer than the suite, a process per file):

    python tools/run_files_alone.py [PATH ...] [--exclude PATH] [--timeout S] [--shuffle SEED]

PATHs (files or folders) narrow the files to those under them; without any, every file of the
README's command, the bundled scenario catalog included. ``--shuffle SEED`` also shuffles each
file's tests (tools/pytest_shuffle.py). A file's line names its failing tests from pytest's
short summary, and the command that repeats it.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# the README's test command without -n (tests/infra/test_run_files_alone.py holds the two equal)
README_COMMAND = "python -m pytest -n 2 -q"


def without_workers(command: str) -> list[str]:
    """``command``'s words without xdist's worker count (``-n N``, ``-nN``,
    ``--numprocesses N``, ``--numprocesses=N``)."""
    words, out = shlex.split(command), []
    skip = False
    for word in words:
        if skip:
            skip = False
        elif word in ("-n", "--numprocesses"):
            skip = True
        elif not (word.startswith("--numprocesses=") or (word.startswith("-n") and
                                                          word[2:].isalnum())):
            out.append(word)
    return out


# python -m pytest -q, run by this interpreter, with no cache
ALONE = [sys.executable, *without_workers(README_COMMAND)[1:], "-p", "no:cacheprovider"]


def files_of(collection: str) -> list[str]:
    """The files of ``pytest --collect-only -q``'s node ids, in their order, each once."""
    files: list[str] = []
    for line in collection.splitlines():
        if "::" in line and not line.startswith(" "):
            name = line.split("::", 1)[0]
            if name not in files:
                files.append(name)
    return files


def collected_files(paths: list[str]) -> list[str]:
    """The files whose tests the README's command (narrowed to ``paths``) selects, in order."""
    proc = subprocess.run([*ALONE, "--collect-only", *paths], cwd=ROOT, capture_output=True,
                          text=True)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-15:]
        sys.exit("collection failed (exit {}):\n{}".format(proc.returncode, "\n".join(tail)))
    return files_of(proc.stdout)


def outcome(returncode: int, output: str) -> tuple[str, str, list[str]]:
    """(PASS|FAIL, pytest's summary line without its time, the lines that say what failed:
    the FAILED/ERROR lines of its short summary, else its last lines)."""
    lines = [line for line in output.splitlines() if line.strip()]
    summary = lines[-1].strip().strip("= ").rsplit(" in ", 1)[0] if lines else "no output"
    failing = [line for line in lines if line.startswith(("FAILED ", "ERROR "))]
    if returncode != 0 and not failing:
        failing = lines[-15:]
    return ("PASS" if returncode == 0 else "FAIL"), summary, failing


def run_alone(name: str, extra: list[str], timeout: float) -> tuple[str, float, str, list[str]]:
    """(PASS|FAIL|TIMEOUT, seconds, pytest's summary line, its FAILED/ERROR lines)."""
    start = time.monotonic()
    # a session of its own, so a timeout ends the workers a test started too
    proc = subprocess.Popen([*ALONE, *extra, name], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return "TIMEOUT", time.monotonic() - start, f"over {timeout:g} s", []
    verdict, summary, failing = outcome(proc.returncode, out)
    return verdict, time.monotonic() - start, summary, failing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="*", metavar="PATH",
                        help="files or folders to take the files from (default: the suite)")
    parser.add_argument("--exclude", action="append", default=[], metavar="PATH",
                        help="leave out the files under PATH (repeatable)")
    parser.add_argument("--timeout", type=float, default=900.0, metavar="S",
                        help="seconds one file may run (default 900)")
    parser.add_argument("--shuffle", type=int, default=None, metavar="SEED",
                        help="shuffle each file's tests in the order SEED draws")
    args = parser.parse_args(argv)
    for path in [*args.paths, *args.exclude]:
        if not (ROOT / path).exists():
            print(f"run_files_alone: no such file or folder: {path}", file=sys.stderr)
            return 2
    if args.timeout <= 0:
        print("run_files_alone: --timeout must be above 0", file=sys.stderr)
        return 2
    excluded = [Path(p).as_posix().rstrip("/") for p in args.exclude]
    files = [f for f in collected_files(args.paths)
             if not any(f == e or f.startswith(e + "/") for e in excluded)]
    extra = [] if args.shuffle is None else ["-p", "tools.pytest_shuffle",
                                             "--shuffle", str(args.shuffle)]
    start, bad = time.monotonic(), []
    for name in files:
        verdict, seconds, summary, failing = run_alone(name, extra, args.timeout)
        print(f"{verdict:7} {seconds:7.1f}s  {name}  ({summary})", flush=True)
        if verdict != "PASS":
            bad.append(name)
            for line in failing:
                print(f"          {line}", flush=True)
            print(f"          again: {' '.join(['python', *ALONE[1:], *extra, name])}",
                  flush=True)
    total = time.monotonic() - start
    print(f"{len(files)} files alone: {len(files) - len(bad)} passed, {len(bad)} failed "
          f"in {total:.0f} s" + (f" ({', '.join(bad)})" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
