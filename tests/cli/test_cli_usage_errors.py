"""Bad command lines: exit 2, one sentence on stderr, no traceback, and no work done first.

Each case is a real ``kvreg`` process, because "no traceback" is about what a user sees.
"""

from __future__ import annotations

from pathlib import Path

import pytest

MLA = "mla/page_first_direct/below-limit"


def _one_line_error(proc, *expected: str) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-500:], proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    for text in expected:
        assert text in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def binary_toml(tmp_path: Path) -> Path:
    path = tmp_path / "binary.toml"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe\x00\x00 not text")
    return path


@pytest.mark.parametrize(("args", "expected"), [
    (["run", "--json", "/nonexistent/dir/out.json"],
     ["--json /nonexistent/dir/out.json", "folder /nonexistent/dir does not exist"]),
    (["run", "--json", "{tmp}"], ["--json", "is a folder"]),
    (["run", "--junit-xml", "/nonexistent/dir/j.xml"], ["--junit-xml", "does not exist"]),
    (["run", "--write-baseline", "{tmp}"], ["--write-baseline", "is a folder"]),
    (["run", "--baseline", "{tmp}/missing.txt"], ["--baseline", "no such baseline file"]),
    (["run", "-j", "0"], ["-j", "expected an integer >= 1, got 0"]),
    (["run", "-j", "-3"], ["expected an integer >= 1, got -3"]),
    (["run", "--shard", "3/2"], ["--shard", "1 <= K <= N"]),
    (["run", "--shard", "x"], ["--shard", "expected K/N"]),
    (["run", "{tmp}"], ["no scenario files (*.toml)", "under"]),
    (["run", "{tmp}/nope"], ["no such file or folder"]),
    (["plan", "mla", "layout=page_first", "--chunk-gb", "0"],
     ["--chunk-gb", "expected an integer >= 1, got 0"]),
    (["plan", "mla", "layout=page_first", "--chunk-gb", "-1"], ["expected an integer >= 1"]),
    (["plan", "mla", "layout=page_first_direct", "layer_num=2", "kv_lora_rank=4",
      "qk_rope_head_dim=4", "dtype=bfloat16", "page_size=2", "page_num=4", "--svg",
      "/nonexistent/x.svg"], ["--svg /nonexistent/x.svg", "does not exist"]),
    (["coverage", "--out", "/nonexistent/dir/COVERAGE.md"], ["--out", "does not exist"]),
    (["run", "--impl", "nofile.py:register"], ["no such file"]),
])
def test_usage_errors(kvreg_cli, tmp_path: Path, args: list[str], expected: list[str]) -> None:
    argv = [a.replace("{tmp}", str(tmp_path)) for a in args]
    _one_line_error(kvreg_cli(*argv), *(e.replace("{tmp}", str(tmp_path)) for e in expected))


def test_non_utf8_scenario_file(kvreg_cli, binary_toml: Path) -> None:
    _one_line_error(kvreg_cli("run", str(binary_toml)), str(binary_toml), "not UTF-8 text")


def test_a_bad_json_path_is_refused_before_any_scenario_runs(kvreg_cli, spec_of) -> None:
    # an implementation that would take long: nothing may run before the path check
    proc = kvreg_cli("run", "--impl", spec_of("infinite_retry"), "--json",
                     "/nonexistent/dir/out.json")
    _one_line_error(proc, "does not exist")
    assert proc.stdout == ""


def test_guards_rule_is_stated(kvreg_cli, tmp_path: Path) -> None:
    f = tmp_path / "short.toml"
    f.write_text('format = 1\n[pool]\ntype = "mla"\nparams = { layout = "page_first", '
                 'layer_num = 2, kv_lora_rank = 4, qk_rope_head_dim = 4, dtype = "bfloat16", '
                 'page_size = 2 }\n[[scenario]]\nname = "x"\nguards = "short"\npages = 4\n')
    proc = kvreg_cli("run", str(f))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "at least 10 characters" in proc.stderr and "one line" in proc.stderr


def test_version(kvreg_cli) -> None:
    from importlib import metadata

    proc = kvreg_cli("--version")
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"kvreg {metadata.version('kvreg')}"


def test_coverage_writes_only_where_asked(kvreg_cli, tmp_path: Path) -> None:
    proc = kvreg_cli("coverage", cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.startswith("#")      # stdout by default
    assert list(tmp_path.iterdir()) == []                           # nothing written here
    out = tmp_path / "cov.md"
    proc = kvreg_cli("coverage", "--out", str(out), cwd=tmp_path)
    assert proc.returncode == 0 and out.read_text().startswith("#")
    assert f"wrote {out}" in proc.stdout
