"""``kvreg run`` and ``kvreg list`` per the public contract: exit codes 0/1/2, the table, the
JSON report (``--json -`` and ``--json FILE``), ``-k``, ``--jobs``, ``--impl`` / ``--teardown``
/ ``--style`` errors, the generic style."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kvreg.harness.cli import main

from ..helpers.kvreg_cli import run_json
from ..helpers.paths import CUDA_IMPLS

MLA = "mla/page_first_direct"


def test_exit_0_and_a_table_when_everything_passes(kvreg_cli) -> None:
    proc = kvreg_cli("run", "-k", f"{MLA}/below-limit")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split() == [f"{MLA}/below-limit", "PASS"]
    assert lines[-1] == "1 passed, 0 failed"
    # without a terminal, progress is a line per 10 % of the scenarios (here: the only one)
    assert proc.stderr == "kvreg run: 1/1 scenarios done (100 %)\n"


def test_exit_1_and_the_first_violation_in_the_table(kvreg_cli, spec_of) -> None:
    proc = kvreg_cli("run", "--impl", spec_of("byte_offset_seams"), "--trace",
                     "-k", f"{MLA}/above-limit")
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    # the causes block leads: how many scenarios, the rule, where in the implementation
    # (path:line as the user opens it) with that line's source, then an example
    path = spec_of("byte_offset_seams").rpartition(":")[0]
    assert lines[0].startswith("causes (")
    head = next(line for line in lines if "[transfer-failed]" in line)
    m = re.fullmatch(r" +(\d+) scenario\(s\)  \[([a-z-]+)\]  (.+?):(\d+): (.+)", head)
    assert m is not None, head
    count, rule, file, line, source = m.groups()
    assert count == "1" and rule == "transfer-failed"
    assert Path(file).resolve() == Path(path).resolve()
    assert source.strip() == Path(path).read_text().splitlines()[int(line) - 1].strip()
    assert "cudaHostRegister" in source
    example = lines[lines.index(head) + 1]
    assert example.startswith(f"        e.g. {MLA}/above-limit: page 238 of kv_buffer")
    row = next(line for line in lines if line.startswith(f"{MLA}/above-limit "))
    assert " FAIL " in row
    assert "page 238 of kv_buffer" in row and "spans registrations at offset 1073741824" in row
    # --trace prints the recorded calls of the failure, indented under its row
    assert "\n    " in proc.stdout and "cudaHostRegister" in proc.stdout
    assert proc.stdout.rstrip().endswith("0 passed, 1 failed")


def test_json_stdout_file_and_jobs_agree(kvreg_cli, spec_of, report, catalog, capsys,
                                         tmp_path: Path) -> None:
    """One selection, three ways: ``-j 1 --json -`` and ``-j 1 --json FILE`` (in this
    process, as the CLI's main) and ``--jobs 2 --json -`` (a real process with workers)."""
    args = ["run", "--impl", spec_of("byte_offset_seams"), "-k", f"{MLA}/"]
    two = kvreg_cli(*args, "--jobs", "2", "--json", "-")
    assert two.returncode == 1 and "Traceback" not in two.stderr
    capsys.readouterr()
    assert main([*args, "-j", "1", "--json", "-"]) == 1
    doc_one = json.loads(capsys.readouterr().out)
    out = tmp_path / "report.json"
    assert main([*args, "-j", "1", "--json", str(out)]) == 1
    table = capsys.readouterr().out
    doc_two, doc_file = json.loads(two.stdout), json.loads(out.read_text())
    by_id = report(doc_one)
    report(doc_two)
    report(doc_file)
    # same verdicts and violations, in the same (catalog) order, whatever the job count
    assert doc_one == doc_two == doc_file
    # -k keeps exactly the scenarios whose id contains the text
    assert list(by_id) == [s.id for s in catalog if f"{MLA}/" in s.id]
    assert len(by_id) >= 14
    verdicts = {s["verdict"] for s in by_id.values()}
    assert verdicts == {"pass", "fail"}
    hit = by_id[f"{MLA}/above-limit"]
    assert hit["pool"] == "mla/page_first_direct"
    assert hit["violations"][0]["rule"] == "transfer-failed"
    assert "page 238" in hit["violations"][0]["message"]
    # --json FILE still prints the table, one row per scenario plus the summary
    rows = [ln for ln in table.splitlines() if ln.startswith(f"{MLA}/")]
    assert [r.split()[0] for r in rows] == list(by_id)
    assert [r.split()[1] for r in rows] == [s["verdict"].upper() for s in by_id.values()]
    s = doc_file["summary"]
    assert table.rstrip().endswith(f"{s['passed']} passed, {s['failed']} failed")


def _scenarios(*argv: str) -> tuple[int, dict]:
    """``kvreg run ARGV --json -``: exit code, scenarios by id."""
    run = run_json(*argv)
    return run.returncode, run.scenarios()


def test_generic_style(spec_of) -> None:
    rc, ok = _scenarios("--style", "generic", "--impl", "kvreg.harness.cuda.reference:register",
                        "-k", "_direct/last-partial-chunk")
    assert rc == 0 and len(ok) >= 8
    assert all(s["verdict"] == "pass" for s in ok.values())
    rc, bad = _scenarios("--style", "generic", "--impl", spec_of("past_end"),
                         "-k", f"{MLA}/last-partial-chunk")
    assert rc == 1
    assert bad[f"{MLA}/last-partial-chunk"]["violations"][0]["rule"] == "range-outside-buffer"


def test_teardown_option_replaces_the_default_teardown(spec_of) -> None:
    # never_unregisters leaks with its own teardown ...
    rc, res = _scenarios("--impl", spec_of("never_unregisters"), "-k", f"{MLA}/above-limit")
    assert rc == 1 and res[f"{MLA}/above-limit"]["violations"][0]["rule"] == "leak"
    # ... and passes with a teardown that releases the same attribute
    rc, res = _scenarios("--impl", spec_of("never_unregisters"),
                         "--teardown", spec_of("byte_offset_seams", "teardown"),
                         "-k", f"{MLA}/above-limit")
    assert rc == 0 and res[f"{MLA}/above-limit"]["verdict"] == "pass"


def test_list_shows_the_catalog(kvreg_cli, catalog) -> None:
    proc = kvreg_cli("list")
    assert proc.returncode == 0
    lines = proc.stdout.splitlines()
    assert lines[-1] == f"{len(catalog)} scenarios"
    ids = [ln.split()[0] for ln in lines[:-2]]
    assert ids == [s.id for s in catalog]
    first = catalog[0]
    assert lines[0].split(None, 1)[1].strip() == first.guards


def test_list_k_filters(capsys, catalog) -> None:
    assert main(["list", "-k", "regressions/"]) == 0
    lines = capsys.readouterr().out.splitlines()
    wanted = [s.id for s in catalog if "regressions/" in s.id]
    assert [ln.split()[0] for ln in lines[:-2]] == wanted
    assert lines[-1] == f"{len(wanted)} scenarios"


@pytest.mark.parametrize(("argv", "words"), [
    (["--impl", "no/such/file.py:register"], ["no such file", "no/such/file.py"]),
    (["--impl", "IMPLS/byte_offset_seams.py:nope"], ["has no function 'nope'"]),
    (["--impl", "IMPLS/byte_offset_seams.py"], ["expected file.py:function"]),
    (["--impl", "kvreg.harness.no_such_module:register"], ["cannot import",
                                                           "kvreg.harness.no_such_module"]),
    (["--impl", "IMPLS/byte_offset_seams.py:register", "--teardown", "IMPLS/past_end.py:gone"],
     ["has no function 'gone'"]),
    (["--teardown", "IMPLS/past_end.py:teardown"], ["--teardown needs --impl"]),
    (["--style", "generic"], ["--style generic needs --impl"]),
], ids=["missing-file", "missing-function", "no-function", "bad-module", "missing-teardown",
        "teardown-alone", "style-alone"])
def test_impl_errors_exit_2_with_a_message(argv, words, capsys, monkeypatch) -> None:
    import kvreg.harness.cli.run as run_cli

    argv = [a.replace("IMPLS", str(CUDA_IMPLS)) for a in argv]
    monkeypatch.setattr(run_cli, "_run_all", _must_not_run)
    assert main(["run", *argv, "-k", f"{MLA}/below-limit"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith("kvreg run: error: ")
    for w in words:
        assert w in err, err
    assert "Traceback" not in err


def test_impl_that_fails_to_import_exits_2(kvreg_cli, tmp_path: Path) -> None:
    broken = tmp_path / "broken_impl.py"
    broken.write_text("import os\nraise ImportError('no module named sglang_kernels')\n")
    proc = kvreg_cli("run", "--impl", f"{broken}:register", "-k", f"{MLA}/below-limit")
    assert proc.returncode == 2
    assert "importing" in proc.stderr and str(broken) in proc.stderr
    assert "ImportError: no module named sglang_kernels" in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_usage_errors_exit_2(kvreg_cli, capsys, monkeypatch) -> None:
    import kvreg.harness.cli.run as run_cli

    monkeypatch.setattr(run_cli, "_run_all", _must_not_run)
    assert main(["run", "-k", "no-scenario-has-this-in-its-id"]) == 2
    assert "no scenario matches" in capsys.readouterr().err
    assert main(["run", "no/such/folder"]) == 2
    assert "no/such/folder: no such file or folder" in capsys.readouterr().err
    # argparse errors (unknown style) are exit 2 too, through the real process
    proc = kvreg_cli("run", "--style", "fortran")
    assert proc.returncode == 2 and "--style" in proc.stderr and "Traceback" not in proc.stderr


def _must_not_run(*args, **kwargs):
    raise AssertionError("a scenario ran although the command line was invalid")
