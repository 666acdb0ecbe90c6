"""Shared helpers for the supervised-execution proofs: tiny scenario files, the CLI.

The scenario files are small (an MLA pool of 595 pages in 1 GiB chunks: three chunks of
``kv_buffer``), so every run of an implementation that misbehaves after two chunks takes
well under a second, and a verdict can say "after 2 cudaHostRegister calls".
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ..cli_process import run_kvreg_process

IMPLS = Path(__file__).parent / "impls"
REPO = Path(__file__).resolve().parents[2]
ENV_CHUNK_GB = "SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB"

POOL = """\
format = 1

[pool]
type = "mla"
params = { layout = "page_first_direct", layer_num = 61, kv_lora_rank = 512, \
qk_rope_head_dim = 64, dtype = "bfloat16", page_size = 64 }
memory = "virtual"

[defaults]
chunk_gb = 1
profile = "h200-r580"
"""

THREE_CHUNKS = """
[[scenario]]
name = "three-chunks"
guards = "a kv_buffer of three 1 GiB chunks"
pages = 595
"""

ONE_CHUNK = """
[[scenario]]
name = "one-chunk"
guards = "a kv_buffer below the chunk limit"
pages = 79
"""


def scenario_file(folder: Path, *bodies: str, name: str = "pool") -> Path:
    """A scenario file of the MLA pool above with the given scenarios."""
    path = folder / f"{name}.toml"
    path.write_text(POOL + "".join(bodies))
    return path


def impl_spec(function: str, module: str = "misbehaving") -> str:
    return f"{IMPLS / (module + '.py')}:{function}"


def kvreg_command() -> list[str]:
    script = Path(sys.executable).with_name("kvreg")
    return [str(script)] if script.exists() else [sys.executable, "-m", "kvreg.harness.cli"]


def cli_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("CI", ENV_CHUNK_GB)}


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``kvreg ARGS`` in a process of its own, forked from a server that imported torch
    once (tests/cli_process.py)."""
    proc: subprocess.CompletedProcess[str] = run_kvreg_process(
        list(args), env=cli_env(), cwd=REPO, timeout=900)
    return proc


def run_json(*args: str) -> tuple[int, dict[str, Any], str]:
    """``kvreg run ARGS --json -``: exit code, the report, stderr."""
    proc = run_cli("run", *args, "--json", "-")
    return proc.returncode, json.loads(proc.stdout), proc.stderr


@pytest.fixture
def three_chunks(tmp_path: Path) -> Path:
    return scenario_file(tmp_path, THREE_CHUNKS)
