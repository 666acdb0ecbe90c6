"""The README's evidence table is the generated one, and the generator reads what exists:
a committed hardware report, a new conformance suite or a new docs label adds its row."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from kvreg.realhw.evidence import BEGIN, END, ROOT, evidence_table, main, replace_block


def _block(text: str) -> str:
    return text[text.index(BEGIN) + len(BEGIN):text.index(END)].strip()


def test_readme_table_is_the_generated_one() -> None:
    readme = (ROOT / "README.md").read_text()
    assert _block(readme) == evidence_table(), \
        "README.md is stale: run python -m kvreg.realhw.evidence --write README.md"
    # the first screen says no hardware run happened, as long as no report is committed
    if not list((ROOT / "realhw" / "reports").glob("**/fidelity.json")):
        assert "No GPU or RDMA run has happened yet" in readme[:2000]
        assert "**none yet**" in _block(readme)


def _tree(tmp_path: Path) -> Path:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("x **[DOC]** y **[UNC]** z **[DOC]**\n")
    (tmp_path / "tests" / "t").mkdir(parents=True)
    return tmp_path


def test_labels_suites_and_reports_each_add_rows(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    table = evidence_table(root)
    assert "| docs label [DOC] | 2 labelled statement(s): documented by the vendor" in table
    assert "| docs label [UNC] | 1 labelled statement(s)" in table
    assert "**none yet**" in table
    # a new label and a new real-implementation suite appear without editing the generator
    (root / "docs" / "b.md").write_text("**[real-store]** checked on the real store\n")
    (root / "tests" / "t" / "test_real_store.py").write_text(
        '"""The fake store against the real Mooncake store."""\n\n\ndef test_a():\n    pass\n\n\n'
        'def test_b():\n    pass\n')
    table = evidence_table(root)
    assert "| docs label [real-store] | 1 labelled statement(s)" in table
    assert ("| `tests/t/test_real_store.py` | The fake store against the real Mooncake store "
            "(2 test functions) |") in table
    # a committed hardware report replaces "none yet" with what ran
    report = root / "realhw" / "reports" / "h200-box"
    report.mkdir(parents=True)
    rows = [{"name": "p1", "family": "cuda", "verdict": "agree", "real": {"status": "ok"}},
            {"name": "p2", "family": "cuda", "verdict": "disagree", "real": {"status": "ok"}},
            {"name": "p3", "family": "rdma", "verdict": "skipped",
             "real": {"status": "not run"}}]
    (report / "fidelity.json").write_text(json.dumps({"created": "2026-12-01", "probes": rows}))
    table = evidence_table(root)
    assert "**none yet**" not in table
    assert ("| hardware run `realhw/reports/h200-box` (2026-12-01) | 2 fidelity probe(s) ran "
            "on the hardware (cuda), 1 agree with the fake |") in table


def test_write_replaces_only_the_block(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    text = f"head\n{BEGIN}\nold\n{END}\ntail\n"
    assert replace_block(text, "NEW") == f"head\n{BEGIN}\nNEW\n{END}\ntail\n"
    target = tmp_path / "R.md"
    shutil.copy(ROOT / "README.md", target)
    assert main(["--write", str(target)]) == 0
    assert target.read_text() == (ROOT / "README.md").read_text()
    target.write_text("no markers\n")
    assert main(["--write", str(target)]) == 2
    assert "the evidence markers are missing" in capsys.readouterr().err
    assert target.read_text() == "no markers\n"
