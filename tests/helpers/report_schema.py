"""A ``kvreg run`` JSON report held to the public contract (ARCHITECTURE.md#public-contract):
its keys, counts, verdicts, violations and causes."""

from __future__ import annotations

import re
from typing import Any

SUMMARY_KEYS = {"total", "passed", "failed", "errors", "skipped"}
SCENARIO_KEYS = {"id", "pool", "verdict", "violations", "warnings"}
VERDICT_COUNTS = {"pass": "passed", "fail": "failed", "error": "errors", "skip": "skipped"}


def check_report(doc: Any) -> dict[str, dict[str, Any]]:
    """Assert ``doc`` is exactly the contract's JSON report; return scenarios by id.

    ``{"summary": {"total", "passed", "failed", "errors", "skipped"}, "contract": {"style",
    "register", "keywords", "rules", "teardown", "text"}, "scenarios": [{"id", "pool", "verdict",
    "violations", "warnings"}]}``; a skipped or errored scenario may add a
    string ``reason``; a scenario whose pages went through the batch copy may add ``copy``
    (``{"pages_copied", "pages_total", "method"}``), nothing else. ``warnings`` is always
    present, possibly empty.
    """
    assert isinstance(doc, dict) and set(doc) == {"summary", "contract", "causes", "hints",
                                                  "scenarios"}, doc.keys()
    contract = doc["contract"]
    assert set(contract) == {"style", "register", "keywords", "rules", "teardown", "text"}, \
        contract
    assert set(contract["teardown"]) == {"repeatable", "known_by"}, contract
    assert contract["teardown"]["known_by"] in ("style", "close", "attribute", "undeclared")
    assert contract["text"].startswith("contract: ") and isinstance(contract["keywords"], dict)
    assert set(contract["rules"]) <= {"chunk-over-limit", "not-rejected", "rejected-too-late",
                                      "rejected-wrong-error"}
    assert isinstance(doc["hints"], list) and all(isinstance(h, str) and h for h in doc["hints"])
    summary, scenarios = doc["summary"], doc["scenarios"]
    assert set(summary) == SUMMARY_KEYS
    assert all(type(summary[k]) is int and summary[k] >= 0 for k in SUMMARY_KEYS), summary
    assert isinstance(scenarios, list)
    assert summary["total"] == len(scenarios)
    assert summary["total"] == sum(summary[k] for k in SUMMARY_KEYS - {"total"})
    by: dict[str, dict[str, Any]] = {}
    for s in scenarios:
        extra = set(s) - SCENARIO_KEYS
        assert set(s) >= SCENARIO_KEYS, s
        assert extra <= {"reason", "copy", "ranks"}, s
        for entry in s.get("ranks", []):     # a many-rank scenario's ranks, in order
            assert set(entry) - {"reason"} == {"rank", "verdict", "violations"}, entry
            assert entry["verdict"] in VERDICT_COUNTS and isinstance(entry["violations"], list)
        if "ranks" in extra:
            assert [e["rank"] for e in s["ranks"]] == list(range(len(s["ranks"]))), s
        if "reason" in extra:
            assert s["verdict"] in ("skip", "error") and isinstance(s["reason"], str)
            assert s["reason"]
        if "copy" in extra:
            copy = s["copy"]
            assert set(copy) == {"pages_copied", "pages_total", "method"}, copy
            assert 0 <= copy["pages_copied"] <= copy["pages_total"] and copy["method"]
        assert isinstance(s["id"], str) and isinstance(s["pool"], str) and s["pool"]
        assert s["verdict"] in VERDICT_COUNTS, s
        assert isinstance(s["violations"], list)
        assert isinstance(s["warnings"], list)
        for v in s["violations"] + s["warnings"]:
            # where (path:line) and code come together; count only above 1
            assert set(v) in ({"rule", "message"}, {"rule", "message", "count"},
                              {"rule", "message", "where", "code"},
                              {"rule", "message", "where", "code", "count"}), v
            assert isinstance(v["rule"], str) and isinstance(v["message"], str)
            assert v["rule"] and v["message"]
            assert v.get("count", 2) >= 2 and re.fullmatch(r".+:\d+", v.get("where", "x:1"))
        # a failure always says why; nothing else carries violations
        assert bool(s["violations"]) == (s["verdict"] == "fail"), s
        assert s["id"] not in by, f"duplicate id {s['id']}"
        by[s["id"]] = s
    for verdict, key in VERDICT_COUNTS.items():
        assert summary[key] == sum(1 for s in scenarios if s["verdict"] == verdict), key
    check_causes(doc["causes"], scenarios)
    return by


def check_causes(causes: Any, scenarios: list[dict[str, Any]]) -> None:
    """``causes`` is the contract's list: most frequent first, every failing or erroring
    scenario under at least one of them, each count the scenarios that show it."""
    assert isinstance(causes, list)
    keys = {"rule", "where", "code", "scenarios", "example", "message"}
    for c in causes:
        assert set(c) == keys, c
        assert type(c["scenarios"]) is int and c["scenarios"] >= 1 and c["message"]
    assert [c["scenarios"] for c in causes] == sorted((c["scenarios"] for c in causes),
                                                      reverse=True)
    by_id = {s["id"]: s for s in scenarios}
    shown: dict[tuple[str, str], set[str]] = {}
    for s in scenarios:
        for v in s["violations"] if s["verdict"] == "fail" else []:
            shown.setdefault((v["rule"], v.get("where", "")), set()).add(s["id"])
    for c in causes:
        example = by_id[c["example"]]
        assert example["verdict"] in ("fail", "error"), c
        if c["rule"] == "error":
            assert example["verdict"] == "error"
        elif c["where"]:
            assert len(shown[(c["rule"], c["where"])]) == c["scenarios"], c
    for s in scenarios:
        if s["verdict"] == "error":
            assert any(c["rule"] == "error" for c in causes), s["id"]
        for v in s["violations"] if s["verdict"] == "fail" else []:
            assert any(c["rule"] == v["rule"] and c["where"] == v.get("where", "")
                       for c in causes), (s["id"], v)
