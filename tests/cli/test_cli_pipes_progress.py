"""``kvreg`` as a command-line tool: progress where there is no terminal, ``--quiet``, and
a reader that leaves early (``kvreg list | head -1``) ends the command quietly.

A closed pipe is made deterministic here: the read end is closed before kvreg starts, so
its first write to stdout fails with EPIPE (Python ignores SIGPIPE), however small the
output. The files the command was asked to write are still written and the exit status is
the command's own.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvreg.harness.cli.progress import LINE_EVERY_S, Reporter, make_reporter

from ..helpers.kvreg_cli import cli_env
from ..helpers.paths import CUDA_IMPLS, REPO

KVREG = [sys.executable, "-m", "kvreg.harness.cli"]
ONE = "mla/page_first_direct/below-limit"
MLA = ["mla", "layout=page_first_direct", "layer_num=61", "kv_lora_rank=512",
       "qk_rope_head_dim=64", "dtype=bfloat16", "page_size=64", "page_num=20000"]


def run_closed_stdout(*args: str) -> subprocess.CompletedProcess[str]:
    """kvreg with a stdout whose reader is already gone."""
    r, w = os.pipe()
    os.close(r)
    try:
        return subprocess.run([*KVREG, *args], stdout=w, stderr=subprocess.PIPE, text=True,
                              env=cli_env(), cwd=REPO, timeout=600, check=False)
    finally:
        os.close(w)


def _clean(proc: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr
    assert "Exception ignored" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("args", [["list"], ["run", "--help"], ["coverage"]])
def test_output_only_commands_end_quietly_with_0(args: list[str]) -> None:
    proc = run_closed_stdout(*args)
    _clean(proc)
    assert proc.returncode == 0


def test_run_keeps_its_status_and_writes_its_files(tmp_path: Path) -> None:
    report, junit = tmp_path / "r.json", tmp_path / "j.xml"
    proc = run_closed_stdout("run", "-k", ONE, "--json", str(report), "--junit-xml", str(junit))
    _clean(proc)
    assert proc.returncode == 0
    assert json.loads(report.read_text())["summary"]["passed"] == 1
    assert junit.read_text().startswith("<?xml")


def test_run_with_a_failure_still_exits_1(tmp_path: Path) -> None:
    """A closed stdout never turns a failing run green (the worst defect is a wrong verdict)."""
    impl = CUDA_IMPLS / "byte_offset_seams.py"
    baseline = tmp_path / "b.txt"
    proc = run_closed_stdout("run", "--impl", f"{impl}:register", "-k",
                             "mla/page_first_direct/above-limit",
                             "--write-baseline", str(baseline))
    _clean(proc)
    assert proc.returncode == 0            # --write-baseline records: 0 by contract
    assert "above-limit" in baseline.read_text()
    proc = run_closed_stdout("run", "--impl", f"{impl}:register", "-k",
                             "mla/page_first_direct/above-limit")
    _clean(proc)
    assert proc.returncode == 1


def test_plan_writes_its_svg_after_the_reader_left(tmp_path: Path) -> None:
    svg = tmp_path / "p.svg"
    proc = run_closed_stdout("plan", *MLA, "--chunk-gb", "1", "--svg", str(svg))
    _clean(proc)
    assert proc.returncode == 0
    assert svg.read_text().startswith("<svg")


def test_a_shell_pipeline_into_head() -> None:
    """The literal case: ``kvreg list | head -1`` under pipefail."""
    cmd = " ".join(KVREG) + " list | head -1"
    proc = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True,
                          text=True, env=cli_env(), cwd=REPO, timeout=300, check=False)
    _clean(proc)
    assert proc.returncode == 0 and len(proc.stdout.splitlines()) == 1


def test_progress_lines_without_a_terminal_and_none_with_quiet() -> None:
    base = [*KVREG, "run", "-k", "mla/page_first_direct/a"]     # at- and above-limit
    proc = subprocess.run(base, capture_output=True, text=True, env=cli_env(), cwd=REPO,
                          timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert lines and all(ln.startswith("kvreg run: ") and "\r" not in ln for ln in lines)
    assert lines == ["kvreg run: 1/2 scenarios done (50 %)",
                     "kvreg run: 2/2 scenarios done (100 %)"]
    quiet = subprocess.run([*base, "--quiet"], capture_output=True, text=True, env=cli_env(),
                           cwd=REPO, timeout=600, check=False)
    assert quiet.returncode == 0 and quiet.stderr == ""
    assert quiet.stdout == proc.stdout


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_line_per_ten_percent() -> None:
    out = io.StringIO()
    rep = Reporter(out, 67, terminal=False, clock=_Clock())
    for n in range(1, 68):
        rep.tick(n)
    rep.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 10                  # 10 %, 20 %, ... 100 %: one line each
    assert lines[0] == "kvreg run: 7/67 scenarios done (10 %)"
    assert lines[-1] == "kvreg run: 67/67 scenarios done (100 %)"


def test_a_line_every_few_seconds_while_scenarios_finish() -> None:
    """A slow run of many scenarios: a line every LINE_EVERY_S seconds, but only when one
    finished since the last line (no repeated line for a stuck scenario)."""
    out, clock = io.StringIO(), _Clock()
    rep = Reporter(out, 1000, terminal=False, clock=clock)
    rep.tick(1)
    assert out.getvalue() == ""
    clock.now = LINE_EVERY_S
    rep.tick(2)
    assert out.getvalue() == "kvreg run: 2/1000 scenarios done (0 %)\n"
    clock.now = 3 * LINE_EVERY_S
    rep.tick(2)
    assert out.getvalue().count("\n") == 1


def test_a_counter_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.delenv("CI", raising=False)
    out = Tty()
    rep = make_reporter(out, 3, quiet=False)
    for n in (1, 2, 3):
        rep.tick(n)
    rep.close()
    text = out.getvalue()
    assert "\r1/3 scenarios\r2/3 scenarios\r3/3 scenarios\r" in text and "\n" not in text
    monkeypatch.setenv("CI", "true")          # a CI runner that gives a tty still logs
    out = Tty()
    rep = make_reporter(out, 3, quiet=False)
    rep.tick(3)
    assert out.getvalue() == "kvreg run: 3/3 scenarios done (100 %)\n"
    out = Tty()
    rep = make_reporter(out, 3, quiet=True)
    rep.tick(3)
    rep.close()
    assert out.getvalue() == ""
