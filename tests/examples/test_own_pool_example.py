"""The own-pool-class example (examples/own_pool_class): the user's pool passes at 2 TiB, and
the same test catches a pool that seams on bytes or forgets to unregister."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "own_pool_class"


def _pytest(cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:randomly", "-q"],
                          cwd=cwd, capture_output=True, text=True, timeout=300)


def _planted(tmp_path: Path, old: str, new: str) -> Path:
    copy = tmp_path / "own_pool_class"
    shutil.copytree(EXAMPLE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    source = (copy / "hostpool.py").read_text()
    assert old in source
    (copy / "hostpool.py").write_text(source.replace(old, new))
    return copy


def test_the_example_pool_passes_small_and_at_2_tib() -> None:
    out = _pytest(EXAMPLE)
    assert out.returncode == 0, out.stdout[-3000:]
    assert "2 passed" in out.stdout


def test_byte_seams_in_the_pool_class_are_caught(tmp_path: Path) -> None:
    copy = _planted(tmp_path, "step = limit // granularity * granularity", "step = limit")
    out = _pytest(copy)
    assert out.returncode == 1, out.stdout[-3000:]
    # 2 TiB crosses 256 GiB chunks; 1.5 GiB fits one chunk, so only the big case fails
    assert "1 failed, 1 passed" in out.stdout
    assert "[seams-aligned] a seam between two registrations of kv_buffer" in out.stdout


def test_a_destroy_that_forgets_is_caught(tmp_path: Path) -> None:
    copy = _planted(tmp_path, "cudart.cudaHostUnregister(self.chunks.pop())",
                    "self.chunks.pop()")
    out = _pytest(copy)
    assert out.returncode == 1, out.stdout[-3000:]
    assert "2 failed" in out.stdout
    assert "[leak] chunk [kv_buffer+0x0, +" in out.stdout
