"""Shared helpers for the scenario-runner proof tests.

``impls/`` holds implementations under test: deliberately broken ones (one per rule of
``kvreg.harness.cuda.checks``), correct variants that must not be flagged, and a faithful copy of
upstream SGLang's algorithm. The helpers here load them, run the ``kvreg`` CLI in a process
of its own (tests/cli_process.py), and check a JSON report against the public contract
(ARCHITECTURE.md#public-contract).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kvreg.harness.run.implementation import Implementation, make_implementation
from kvreg.harness.scenario import Scenario, load_paths

from ..cli_process import run_kvreg_process

IMPLS = Path(__file__).parent / "impls"
REPO = Path(__file__).resolve().parents[2]
ENV_CHUNK_GB = "SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB"
GiB = 1 << 30

SUMMARY_KEYS = {"total", "passed", "failed", "errors", "skipped"}
SCENARIO_KEYS = {"id", "pool", "verdict", "violations", "warnings"}
VERDICT_COUNTS = {"pass": "passed", "fail": "failed", "error": "errors", "skip": "skipped"}


def impl_spec(name: str, function: str = "register") -> str:
    """``file.py:function`` for an implementation under ``impls/``."""
    return f"{IMPLS / (name + '.py')}:{function}"


@pytest.fixture(scope="session")
def catalog() -> list[Scenario]:
    """The bundled catalog, loaded once per worker."""
    return load_paths()


@pytest.fixture(scope="session")
def by_id(catalog: list[Scenario]) -> dict[str, Scenario]:
    return {s.id: s for s in catalog}


@pytest.fixture
def spec_of() -> Callable[..., str]:
    return impl_spec


@pytest.fixture
def load_impl() -> Callable[[str, str], Implementation]:
    def load(name: str, style: str = "sglang") -> Implementation:
        return make_implementation(impl_spec(name), None, style)

    return load


def run_kvreg(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``kvreg ARGS`` in a process of its own (no terminal, no CI variable, no chunk-limit
    env), forked from a server that imported torch once (tests/cli_process.py)."""
    env = {k: v for k, v in os.environ.items() if k not in ("CI", ENV_CHUNK_GB)}
    proc: subprocess.CompletedProcess[str] = run_kvreg_process(
        list(args), env=env, cwd=cwd or REPO, timeout=900)
    return proc


@pytest.fixture
def kvreg_cli() -> Callable[..., subprocess.CompletedProcess[str]]:
    return run_kvreg


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
        assert extra <= {"reason", "copy"}, s
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


def run_json(*args: str) -> tuple[int, dict[str, dict[str, Any]], dict[str, int], str]:
    """``kvreg run ARGS --json -``: exit code, scenarios by id (schema-checked), summary, stderr."""
    proc = run_kvreg("run", *args, "--json", "-")
    assert "Traceback" not in proc.stderr, proc.stderr
    doc = json.loads(proc.stdout)
    return proc.returncode, check_report(doc), doc["summary"], proc.stderr


@pytest.fixture
def report() -> Callable[[Any], dict[str, dict[str, Any]]]:
    """The schema check of a parsed JSON report (returns its scenarios by id)."""
    return check_report


@pytest.fixture
def kvreg_json() -> Callable[..., tuple[int, dict[str, dict[str, Any]], dict[str, int], str]]:
    return run_json
