"""The tests' forked ``kvreg`` command lines (tests/helpers/cli_process.py) answer as a real
``kvreg`` process does: same exit status, stdout and stderr, for a pass, a failure with its
causes, a usage error, and an implementation that cannot import; and no command leaves
anything behind for the next (each child starts from the server's state)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from ..helpers.cli_process import kvreg_argv0, run_kvreg_process

REPO = Path(__file__).resolve().parents[2]
IMPLS = REPO / "tests" / "cuda_target" / "impls"
MLA = "mla/page_first_direct"


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items()
            if k not in ("CI", "SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB")}


def _real(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    argv0 = kvreg_argv0()
    command = [argv0] if argv0 != "-m" else ["python", "-m", "kvreg.harness.cli"]
    return subprocess.run([*command, *args], capture_output=True, text=True, env=_env(),
                          cwd=cwd, timeout=600, check=False)


@pytest.mark.parametrize("args", [
    ["run", "-k", f"{MLA}/below-limit"],                                         # 0
    ["run", "--impl", f"{IMPLS / 'byte_offset_seams.py'}:register", "-k",        # 1, causes
     f"{MLA}/above-limit"],
    ["run", "--style", "fortran"],                                               # 2
    ["run", "--impl", "no_such_file.py:register"],                               # 2
], ids=["pass", "fail", "usage", "no-impl"])
def test_a_forked_command_answers_as_the_real_process(args: list[str], tmp_path: Path) -> None:
    real = _real(args, REPO)
    forked = run_kvreg_process(args, env=_env(), cwd=REPO)
    assert real.returncode in (0, 1, 2)
    assert (forked.returncode, forked.stdout, forked.stderr) == \
        (real.returncode, real.stdout, real.stderr)


def test_each_command_starts_fresh(tmp_path: Path) -> None:
    """An implementation that counts its imports in a file: each command imports it anew
    (nothing of a run stays in the server), and its working folder is the one asked for."""
    (tmp_path / "counting.py").write_text(
        "from pathlib import Path\n"
        "p = Path('imports.txt')\n"
        "p.write_text(p.read_text() + 'x' if p.exists() else 'x')\n\n\n"
        "def register(cudart, ptr, nbytes, *, granularity, chunk_limit):\n"
        "    raise RuntimeError('refused')\n\n\n"
        "def teardown(cudart, ranges):\n"
        "    pass\n")
    args = ["run", "--impl", "counting.py:register", "--style", "generic", "--in-process",
            "-k", f"{MLA}/below-limit"]
    counts = []
    for _ in range(2):
        proc = run_kvreg_process(args, env=_env(), cwd=tmp_path)
        assert proc.returncode == 1 and "refused" in proc.stdout + proc.stderr, proc.stderr
        counts.append(len((tmp_path / "imports.txt").read_text()))
    # imported as often by the second command as by the first: nothing stayed in the server
    assert counts[0] >= 1 and counts[1] == 2 * counts[0], counts
