"""tools/compare_reports.py: two ``kvreg run --json`` reports compared scenario by scenario,
as issue 26's proof that a refactor changed no verdict of the catalog (docs/refactor-verdicts.md).
The reports here are tiny files in the shape ``kvreg run --json`` writes."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("compare_reports",
                                              ROOT / "tools" / "compare_reports.py")
assert SPEC is not None and SPEC.loader is not None
compare_reports: Any = importlib.util.module_from_spec(SPEC)
sys.modules.setdefault("compare_reports", compare_reports)   # dataclasses look their module up
SPEC.loader.exec_module(compare_reports)

LEAK = {"rule": "leak", "message": "chunk [kv_buffer+0x0, +1070383104) was never released"}
PENDING = {"rule": "error-pending", "message": "torch's runtime still holds "
                                               "cudaErrorMemoryAllocation (2)"}


def scenario(sid: str, verdict: str = "pass", violations: list[dict[str, str]] | None = None,
             warnings: list[dict[str, str]] | None = None, **extra: Any) -> dict[str, Any]:
    return {"id": sid, "pool": "mla/page_first_direct", "verdict": verdict,
            "violations": violations or [], "warnings": warnings or [], **extra}


def write(path: Path, *scenarios: dict[str, Any], contract: str = "sglang") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"summary": {"total": len(scenarios)},
                                "contract": {"style": contract}, "scenarios": list(scenarios)}))
    return path


def test_reports_that_differ_only_in_paths_and_times_are_identical(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    leak_at = {**LEAK, "where": "/tmp/before/tests/impls/bug.py:41", "code": "done = []"}
    before = write(tmp_path / "b.json",
                   scenario("mla/x/above-limit", "fail", [leak_at], [PENDING]),
                   scenario("mha/y/below-limit", "error",
                            reason="/tmp/before/tests/impls/slow.py:12 stopped after 60.0 s in "
                                   "cudaHostRegister(0x7ef010400000, 4096)"))
    after = write(tmp_path / "a.json",
                  scenario("mha/y/below-limit", "error",
                           reason="/work/wt/x/tests/impls/slow.py:12 stopped after 61.25 s in "
                                  "cudaHostRegister(0x7edba4c00000, 4096)"),
                  scenario("mla/x/above-limit", "fail",
                           [{**leak_at, "where": "/work/wt/x/tests/impls/bug.py:41"}],
                           [PENDING]))
    assert compare_reports.main([str(before), str(after)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == ("total: 1 report pair(s), 2 scenario verdicts compared, 2 identical, "
                       "0 differing")


@pytest.mark.parametrize(("changed", "field"), [
    (scenario("mla/x/above-limit", "pass"), "verdict"),
    (scenario("mla/x/above-limit", "fail", [{**LEAK, "rule": "not-rolled-back"}]), "violations"),
    (scenario("mla/x/above-limit", "fail", [{**LEAK, "message": LEAK["message"] + " (713)"}]),
     "violations"),
    # an offset into a buffer is kvreg's word, not an address: a different one is a difference
    (scenario("mla/x/above-limit", "fail",
              [{**LEAK, "message": LEAK["message"].replace("+0x0", "+0x3fccc000000")}]),
     "violations"),
    (scenario("mla/x/above-limit", "fail", [LEAK], [PENDING]), "warnings"),
    (scenario("mla/x/above-limit", "fail", [{**LEAK, "where": "/w/impls/bug.py:41"}]),
     "violations"),
    (scenario("mla/x/above-limit", "fail", [LEAK], copy={"pages_copied": 3}), "copy"),
])
def test_a_changed_verdict_rule_message_or_warning_is_named(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], changed: dict[str, Any],
        field: str) -> None:
    before = write(tmp_path / "b.json", scenario("mla/x/above-limit", "fail", [LEAK]),
                   scenario("mla/x/below-limit"))
    after = write(tmp_path / "a.json", changed, scenario("mla/x/below-limit"))
    assert compare_reports.main([str(before), str(after)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"a  mla/x/above-limit  {field}: ")
    assert "2 common, 1 identical, 1 differing" in out[-2]


def test_the_rules_order_counts_but_not_the_order_of_one_rules_findings(tmp_path: Path) -> None:
    other = {**LEAK, "message": "chunk [kv_buffer+0x3fccc000, +4497408) was never released"}
    first = {"rule": "not-rolled-back", "message": "chunk [kv_buffer+0x0,) no rollback"}
    view = compare_reports.scenario_view
    same = compare_reports.compare("a", {"s": view(scenario("s", "fail", [LEAK, other]))},
                                   {"s": view(scenario("s", "fail", [other, LEAK]))})
    assert (same.identical, same.differences) == (1, [])
    moved = compare_reports.compare("a", {"s": view(scenario("s", "fail", [first, LEAK]))},
                                    {"s": view(scenario("s", "fail", [LEAK, first]))})
    assert moved.differences == [("s", "rule order", ["not-rolled-back", "leak"],
                                  ["leak", "not-rolled-back"])]


def test_a_changed_contract_is_shown_but_counts_no_scenario(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = write(tmp_path / "b.json", scenario("mla/x/a"), contract="sglang")
    after = write(tmp_path / "a.json", scenario("mla/x/a"), contract="generic")
    assert compare_reports.main([str(before), str(after)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == 'a  (report)  contract: {"style": "sglang"} -> {"style": "generic"}'
    assert out[1].startswith("a: 1 common, 1 identical, 0 differing; report fields differ")


def test_scenarios_on_one_side_are_counted_per_folder_not_compared(tmp_path: Path) -> None:
    before = {"mla/x/a": compare_reports.scenario_view(scenario("mla/x/a")),
              "old/z": compare_reports.scenario_view(scenario("old/z"))}
    after = {"mla/x/a": compare_reports.scenario_view(scenario("mla/x/a")),
             "ranks/two/a": compare_reports.scenario_view(scenario("ranks/two/a", "fail")),
             "ranks/two/b": compare_reports.scenario_view(scenario("ranks/two/b")),
             "gpu_rdma/c": compare_reports.scenario_view(scenario("gpu_rdma/c"))}
    result = compare_reports.compare("impl", before, after)
    assert (result.common, result.identical, result.differing) == (1, 1, 0)
    assert result.only_after == {"ranks": 2, "gpu_rdma": 1}
    assert result.only_before == {"old": 1}


def test_folders_pair_reports_by_name_and_list_the_unpaired(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path / "before" / "ref.json", scenario("mla/x/a"))
    write(tmp_path / "before" / "gone.json", scenario("mla/x/a"))
    write(tmp_path / "after" / "ref.json", scenario("mla/x/a", "fail", [LEAK]))
    write(tmp_path / "after" / "new.json", scenario("mla/x/a"))
    assert compare_reports.main([str(tmp_path / "before"), str(tmp_path / "after")]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith('ref  mla/x/a  verdict: pass -> fail')
    assert "unpaired report: gone.json" in out and "unpaired report: new.json" in out


@pytest.mark.parametrize("content", ["{not json", '{"summary": {}}', '{"scenarios": [{}]}'])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, content: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    good = write(tmp_path / "good.json", scenario("mla/x/a"))
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "compare_reports.py"),
                           str(bad), str(good)], capture_output=True, text=True, check=False)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("compare_reports: ")
    assert "Traceback" not in proc.stderr and str(bad) in proc.stderr
