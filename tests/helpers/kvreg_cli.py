"""``kvreg`` command lines as the tests run them: a process of their own with no terminal,
no CI variable and no chunk-limit variable, forked from a server that imported torch once
(cli_process.py); ``run_json`` is the one way to run ``kvreg run --json`` and load its report.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, NamedTuple

from .cli_process import run_kvreg_process
from .paths import REPO
from .report_schema import check_report

# SGLang's chunk limit: a test's own environment must not set the runs' limit
ENV_CHUNK_GB = "SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB"


def cli_env() -> dict[str, str]:
    """This process's environment less what would change a run's verdicts or its output."""
    return {k: v for k, v in os.environ.items() if k not in ("CI", ENV_CHUNK_GB)}


def kvreg_command() -> list[str]:
    """The console script beside this interpreter, for a real process (``-m`` without it)."""
    script = Path(sys.executable).with_name("kvreg")
    return [str(script)] if script.exists() else [sys.executable, "-m", "kvreg.harness.cli"]


def run_kvreg(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``kvreg ARGS`` in a process of its own, forked from the server (cli_process.py)."""
    proc: subprocess.CompletedProcess[str] = run_kvreg_process(
        list(args), env=cli_env(), cwd=cwd or REPO, timeout=900)
    return proc


class JsonRun(NamedTuple):
    """One ``kvreg run --json``: its exit status, the report as written, stdout, stderr."""

    returncode: int
    doc: dict[str, Any]
    stdout: str
    stderr: str

    def scenarios(self) -> dict[str, dict[str, Any]]:
        """The report's scenarios by id, once the report holds to the contract."""
        return check_report(self.doc)


def run_json(*args: str, cwd: Path | None = None, to_file: bool = False) -> JsonRun:
    """``kvreg run ARGS --json -`` (``to_file``: ``--json FILE``, so that stdout keeps the
    table); kvreg never answers with a traceback on stderr."""
    with tempfile.TemporaryDirectory(prefix="kvreg-json-") as tmp:
        target = str(Path(tmp) / "report.json") if to_file else "-"
        proc = run_kvreg("run", *args, "--json", target, cwd=cwd)
        assert "Traceback" not in proc.stderr, proc.stderr
        text = Path(target).read_text() if to_file else proc.stdout
    return JsonRun(proc.returncode, json.loads(text), proc.stdout, proc.stderr)


def run_checked(*args: str) -> tuple[int, dict[str, dict[str, Any]], dict[str, int], str]:
    """``run_json`` with the report held to the contract: exit status, scenarios by id,
    the summary, stderr."""
    run = run_json(*args)
    return run.returncode, run.scenarios(), run.doc["summary"], run.stderr
