"""--junit-xml: one testcase per scenario, failures with every violation, known ones skipped."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from kvreg.harness.cli.junit_xml import render_junit, write_junit
from kvreg.harness.run.result import ScenarioResult, Violation


def _results() -> list[ScenarioResult]:
    return [
        ScenarioResult("mla/page_first/ok", "mla/page_first", "pass", seconds=0.5),
        ScenarioResult("mla/page_first/seam", "mla/page_first", "fail",
                       [Violation("transfer-failed", "page 4 spans registrations \x00<&>"),
                        Violation("leak", "1 registration left")], guards="PR #36798"),
        ScenarioResult("mla/layer_first/known", "mla/layer_first", "fail",
                       [Violation("ceiling", "512 GiB in one call")]),
        ScenarioResult("mooncake/x/err", "mooncake/x", "error", reason="import failed"),
        ScenarioResult("mooncake/x/skipped", "mooncake/x", "skip", reason="style"),
    ]


def test_counts_cases_and_details(tmp_path: Path) -> None:
    path = tmp_path / "kvreg.xml"
    write_junit(path, _results(), known={"mla/layer_first/known"})
    root = ET.parse(path).getroot()             # parses: control characters were dropped
    suite = root.find("testsuite")
    assert suite is not None
    assert {k: suite.get(k) for k in ("tests", "failures", "errors", "skipped")} == \
        {"tests": "5", "failures": "1", "errors": "1", "skipped": "2"}
    cases = {f"{c.get('classname')}/{c.get('name')}": c for c in suite.iter("testcase")}
    assert list(cases) == [r.id for r in _results()]
    failure = cases["mla/page_first/seam"].find("failure")
    assert failure is not None and failure.get("type") == "transfer-failed"
    assert failure.get("message") == "page 4 spans registrations <&>"
    assert "[leak] 1 registration left" in (failure.text or "")
    assert "guards against: PR #36798" in (failure.text or "")
    known = cases["mla/layer_first/known"].find("skipped")
    assert known is not None and known.get("message", "").startswith("known failure (baseline)")
    err = cases["mooncake/x/err"].find("error")
    assert err is not None and err.get("message") == "import failed"
    assert cases["mla/page_first/ok"].get("time") == "0.500"


def test_without_baseline_a_failure_is_a_failure() -> None:
    root = ET.fromstring(render_junit(_results()))
    assert root.get("failures") == "2" and root.get("skipped") == "1"


def test_causes_and_sites_reach_the_report() -> None:
    """The suite's properties list the root causes, most frequent first, and a failure's
    text names where each violation happened, as the table does."""
    from kvreg.harness.run.causes import causes

    results = _results()
    results[1].violations[0] = Violation("transfer-failed", "page 4 spans registrations",
                                         where="impl.py:12", code="cudart.reg(p, n, 0)")
    results.append(ScenarioResult("mla/page_first/seam2", "mla/page_first", "fail",
                                  [Violation("transfer-failed", "page 9 spans registrations",
                                             where="impl.py:12", code="cudart.reg(p, n, 0)",
                                             count=3)]))
    root = ET.fromstring(render_junit(results, causes=causes(results)))
    props = [p.get("value") for p in root.iter("property") if p.get("name") == "kvreg.cause"]
    assert props[0] == ("2 scenario(s) [transfer-failed] impl.py:12: cudart.reg(p, n, 0) "
                        "(e.g. mla/page_first/seam)")
    # every failing or erroring scenario's cause is listed: leak, ceiling and the error
    assert len(props) == 4 and any("[error]" in p and "mooncake/x/err" in p for p in props)
    cases = {f"{c.get('classname')}/{c.get('name')}": c for c in root.iter("testcase")}
    text = cases["mla/page_first/seam2"].find("failure").text or ""  # type: ignore[union-attr]
    assert "[transfer-failed] page 9 spans registrations (x3)\n    at impl.py:12: " \
        "cudart.reg(p, n, 0)" in text
    assert ET.fromstring(render_junit(results)).find("testsuite/properties") is None
