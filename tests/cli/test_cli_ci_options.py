"""The CI options of ``kvreg run``: baselines, --junit-xml, --shard, and --impl resolution."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

from ..helpers.kvreg_cli import run_json
from ..helpers.paths import REPO

MLA = "mla/page_first_direct/"


def _body(path: Path) -> list[str]:
    return [ln for ln in path.read_text().splitlines() if ln and not ln.startswith("#")]


def test_baseline_round_trip_new_known_and_fixed(kvreg_cli, spec_of, tmp_path: Path) -> None:
    base = tmp_path / "kvreg-baseline.txt"
    args = ["run", "--impl", spec_of("byte_offset_seams"), "-k", MLA]
    wrote = kvreg_cli(*args, "--write-baseline", str(base))
    assert wrote.returncode == 0, wrote.stderr                 # recording is not a failure
    lines = _body(base)
    assert lines == sorted(lines) and lines
    assert all(len(line.split()) == 2 and line.startswith(MLA) for line in lines)
    assert f"wrote {len(lines)} known failure(s) to {base}" in wrote.stdout

    # known failures only: green, and said so
    known = kvreg_cli(*args, "--baseline", str(base))
    assert known.returncode == 0, known.stdout[-1500:]
    failing = len({line.split()[0] for line in lines})
    assert f"{failing} scenario(s) fail as recorded, 0 new failure(s), 0 recorded failure(s) " \
        "gone" in known.stdout

    # one recorded failure removed from the file: it is new again, the run fails
    dropped = lines[0]
    base.write_text("\n".join(lines[1:]) + "\n")
    new = kvreg_cli(*args, "--baseline", str(base))
    assert new.returncode == 1
    assert f"NEW failure (not in the baseline): {dropped.split()[0]}" in new.stdout

    # the fixed implementation against the full baseline: green, and every line reported
    base.write_text("\n".join(lines) + "\n")
    fixed = kvreg_cli("run", "-k", MLA, "--baseline", str(base))
    assert fixed.returncode == 0
    for line in lines:
        assert f"no longer fails, remove from the baseline: {line}" in fixed.stdout


def test_baseline_with_json_on_stdout_keeps_the_json_clean(kvreg_cli, spec_of,
                                                           tmp_path: Path) -> None:
    base = tmp_path / "b.txt"
    args = ["run", "--impl", spec_of("byte_offset_seams"), "-k", MLA]
    assert kvreg_cli(*args, "--write-baseline", str(base)).returncode == 0
    run = run_json(*args[1:], "--baseline", str(base))
    assert run.returncode == 0
    assert run.doc["summary"]["failed"] == len({ln.split()[0] for ln in _body(base)})
    assert "fail as recorded" in run.stderr


def test_junit_xml_matches_the_json(kvreg_cli, spec_of, tmp_path: Path) -> None:
    xml_path, json_path = tmp_path / "kvreg.xml", tmp_path / "kvreg.json"
    proc = kvreg_cli("run", "--impl", spec_of("byte_offset_seams"), "-k", MLA,
                     "--junit-xml", str(xml_path), "--json", str(json_path))
    assert proc.returncode == 1
    doc = json.loads(json_path.read_text())
    suite = ET.parse(xml_path).getroot().find("testsuite")
    assert suite is not None
    assert int(suite.get("tests", -1)) == doc["summary"]["total"]
    assert int(suite.get("failures", -1)) == doc["summary"]["failed"]
    names = [f"{c.get('classname')}/{c.get('name')}" for c in suite.iter("testcase")]
    assert names == [s["id"] for s in doc["scenarios"]]


def test_shards_partition_the_run(kvreg_cli, tmp_path: Path) -> None:
    ids: list[list[str]] = []
    for k in (1, 2, 3):
        out = tmp_path / f"s{k}.json"
        proc = kvreg_cli("run", "-k", "mla/", "--shard", f"{k}/3", "--json", str(out))
        assert proc.returncode == 0, proc.stderr
        ids.append([s["id"] for s in json.loads(out.read_text())["scenarios"]])
    whole = tmp_path / "all.json"
    assert kvreg_cli("run", "-k", "mla/", "--json", str(whole)).returncode == 0
    every = [s["id"] for s in json.loads(whole.read_text())["scenarios"]]
    assert sorted(i for part in ids for i in part) == sorted(every)
    assert all(ids)


def test_impl_file_resolves_from_the_current_folder_with_its_folder_on_sys_path(
        kvreg_cli, tmp_path: Path) -> None:
    # mypool_fixed.py imports mypool next to it, as `python mypool_fixed.py` would allow
    example = REPO / "examples" / "sglang_style_pool"
    project = tmp_path / "project"
    shutil.copytree(example, project, ignore=shutil.ignore_patterns(".hypothesis"))
    proc = kvreg_cli("run", "kv_scenarios", "--impl", "mypool_fixed.py:register",
                     cwd=project)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.rstrip().endswith("2 passed, 0 failed")
    # and from elsewhere, by a path: the same
    proc = kvreg_cli("run", str(project / "kv_scenarios"), "--impl",
                     f"{project / 'mypool_fixed.py'}:register", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
