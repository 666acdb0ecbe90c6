"""Malformed scenario files: ``kvreg run FILE`` exits 2, names the file and the field, shows
no traceback, and runs nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvreg.harness.cli import main

POOL = '''format = 1
[pool]
type = "mla"
params = { layout = "page_first_direct", layer_num = 61, kv_lora_rank = 512, \
qk_rope_head_dim = 64, dtype = "bfloat16", page_size = 64 }
'''
OK = '''[[scenario]]
name = "ok"
guards = "a valid scenario next to the broken field (sglang PR #36798)"
pages = 10
'''
OTHER = '''[[scenario]]
name = "other"
guards = "a second valid scenario of the same file (sglang PR #36798)"
pages = 12
'''

# name -> (file text, words stderr must contain besides the file name)
MALFORMED = {
    "bad-toml": ("format = 1\n[pool\ntype = 'mla'\n", ["not valid TOML", "line 2"]),
    "format-version": (POOL.replace("format = 1", "format = 2") + OK,
                       ["format: expected 1", "got 2"]),
    "format-missing": (POOL.replace("format = 1\n", "") + OK, ["format: expected 1"]),
    "unknown-top-level-field": ("title = 'x'\n" + POOL + OK, ["title", "unknown field"]),
    "unknown-scenario-field": (POOL + OK + 'colour = "red"\n',
                               ["scenario[0].colour", "unknown field"]),
    "wrong-type": (POOL + OK.replace("pages = 10", 'pages = "many"'),
                   ["scenario[0] (ok): pages: expected an integer >= 1", "'many'"]),
    "wrong-type-bool": (POOL + OK + "empty = 'yes'\n", ["empty: expected true or false"]),
    "unknown-pool-type": (POOL.replace('"mla"', '"mla2"') + OK, ["pool.type", "'mla2'"]),
    "unknown-pool-param": (POOL.replace("page_size = 64", "page_size = 64, frobnicate = 3")
                           + OK, ["pool.params.frobnicate", "a parameter of mla"]),
    "impossible-geometry": (POOL.replace("layer_num = 61", "layer_num = 0") + OK,
                            ["pool: expected a possible geometry", "layer_num"]),
    "unknown-layout": (POOL + OK + 'params = { layout = "diagonal" }\n',
                       ["pool: expected a possible geometry", "diagonal"]),
    "missing-size": (POOL + OK.replace("pages = 10\n", ""), ["pages: expected pages or "
                                                             "total_gib"]),
    "bad-fault-point": (POOL + OK + 'faults = [{ point = "cudart.cudaFrobnicate", nth = 1, '
                        'error = "cudaErrorInvalidValue" }]\n',
                        ["faults[0]", "unknown fault point 'cudart.cudaFrobnicate'"]),
    "impossible-error-code": (POOL + OK + 'faults = [{ point = "cudart.cudaHostRegister", '
                              'nth = 1, error = "cudaErrorLaunchFailure" }]\n',
                              ["faults[0]", "cudart.cudaHostRegister cannot return 719"]),
    "unknown-fault-field": (POOL + OK + 'faults = [{ point = "cudart.cudaHostRegister", '
                            'nth = 1, error = 2, when_ever = 1 }]\n',
                            ["faults[0]", "when_ever"]),
    "missing-guards": (POOL + OK.replace('guards = "a valid scenario next to the broken field '
                                         '(sglang PR #36798)"\n', ""),
                       ["scenario[0] (ok): guards"]),
    "missing-name": (POOL + OK.replace('name = "ok"\n', ""), ["scenario[0].name"]),
    "duplicate-names": (POOL + OK + OK, ["scenario.name: expected names unique", "'ok'"]),
    "bad-expect": (POOL + OK + 'expect = "works"\n', ["expect: expected one of", "'works'"]),
    "bad-exercise": (POOL + OK + 'exercise = ["register", "dance"]\n', ["exercise", "'dance'"]),
    "exercise-order": (POOL + OK + 'exercise = ["teardown", "register"]\n',
                       ["exercise: expected an array starting with 'register'"]),
    "bad-profile": (POOL + OK + 'profile = "b200-r999"\n', ["profile", "'b200-r999'"]),
    # 0, "" and "unset" say how a deployment leaves the variable (test_chunk_env.py)
    "negative-chunk": (POOL + OK + "chunk_gb = -1\n", ["chunk_gb: expected an integer >= 0",
                                                        '"" (set but empty) or "unset"']),
    "word-chunk": (POOL + OK + 'chunk_gb = "none"\n', ["chunk_gb: expected an integer >= 0",
                                                        "'none'"]),
    "zero-chunk-bytes": (POOL + OK + "chunk_bytes = 0\n",
                         ["chunk_bytes: expected an integer >= 1"]),
    "two-chunk-limits": (POOL + OK + "chunk_gb = 1\nchunk_bytes = 4096\n",
                         ["chunk_bytes: expected either chunk_gb or chunk_bytes"]),
    "two-sizes": (POOL + OK + "total_gib = 4\n", ["pages: expected either pages or total_gib"]),
    "no-scenarios": (POOL, ["scenario: expected at least one [[scenario]] table"]),
}


def _must_not_run(*args, **kwargs):
    raise AssertionError("a scenario ran although a scenario file is invalid")


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_file_exits_2_naming_file_and_field(name, tmp_path: Path, capsys,
                                                      monkeypatch) -> None:
    import kvreg.harness.cli.run as run_cli

    text, words = MALFORMED[name]
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    monkeypatch.setattr(run_cli, "_run_all", _must_not_run)
    assert main(["run", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == ""                                   # nothing ran, no table
    assert err.startswith("kvreg run: error: ")
    assert str(path) in err
    for w in words:
        assert w in err, err
    assert "Traceback" not in err
    # kvreg list refuses the same file the same way
    assert main(["list", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and str(path) in err and words[0] in err


def test_every_problem_of_a_file_is_reported_at_once(tmp_path: Path, capsys) -> None:
    path = tmp_path / "many.toml"
    path.write_text(POOL + OK + 'colour = "red"\nexpect = "works"\nprofile = "nope"\n')
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert "colour" in err and "expect" in err and "profile" in err


def test_one_invalid_file_stops_the_whole_run(kvreg_cli, tmp_path: Path, capsys) -> None:
    """Through the real process: a folder of valid and invalid files runs nothing, exits 2,
    and names every invalid file with its field; no traceback."""
    (tmp_path / "a_valid.toml").write_text(POOL + OK + OTHER)
    for name in ("bad-toml", "unknown-scenario-field", "impossible-geometry",
                 "impossible-error-code", "duplicate-names", "format-version"):
        (tmp_path / f"{name}.toml").write_text(MALFORMED[name][0])
    proc = kvreg_cli("run", str(tmp_path))
    assert proc.returncode == 2
    assert proc.stdout == ""                             # no scenario line, no summary
    assert "Traceback" not in proc.stderr
    for name in ("bad-toml", "unknown-scenario-field", "impossible-geometry",
                 "impossible-error-code", "duplicate-names", "format-version"):
        assert str(tmp_path / f"{name}.toml") in proc.stderr, name
        assert MALFORMED[name][1][0] in proc.stderr, name
    assert "a_valid.toml" not in proc.stderr
    # the valid file alone runs: exit 0, both of its scenarios in the table
    (tmp_path / "runnable").mkdir()
    (tmp_path / "runnable" / "a_valid.toml").write_text(POOL + OK + OTHER)
    assert main(["run", str(tmp_path / "runnable")]) == 0
    rows = [ln.split()[:2] for ln in capsys.readouterr().out.splitlines()[:2]]
    assert rows == [["a_valid/ok", "PASS"], ["a_valid/other", "PASS"]]
