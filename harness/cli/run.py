"""``kvreg run`` and ``kvreg list``: the catalog against an implementation, as a table or JSON.

Exit codes (public contract): 0 all selected scenarios pass; 1 at least one fails; 2 usage
error or invalid scenario file (the message names the file and field; no traceback).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, TextIO

from kvreg.harness.run.adapters import (
    STYLES,
    Implementation,
    ImplementationError,
    make_implementation,
)
from kvreg.harness.run.core import run_scenario
from kvreg.harness.run.result import ScenarioResult
from kvreg.harness.scenario.format import Scenario, ScenarioError, bundled_root, load_paths

from .checks import UsageError, positive_int
from .run_extras import add_run_extras, finish, prepare

__all__ = ["add_parsers", "run_list", "run_run", "scenario_paths", "select", "summary"]


def add_parsers(sub: Any) -> None:
    run = sub.add_parser("run", help="run scenarios against an implementation (default: the "
                                     "bundled catalog against kvreg's reference)")
    run.add_argument("paths", nargs="*", type=Path, metavar="PATH",
                     help="scenario files or folders; 'bundled' is kvreg's catalog (the "
                          "default when no PATH is given)")
    run.add_argument("--impl", metavar="SPEC", help="file.py:function or package.module:function")
    run.add_argument("--teardown", metavar="SPEC", help="teardown function (default: "
                                                        "'teardown' next to --impl)")
    run.add_argument("--style", choices=[s for s in STYLES if s != "reference"],
                     help="implementation style (default sglang)")
    run.add_argument("--backend", choices=["fake", "cuda"], default="fake")
    run.add_argument("--pinning", choices=["required", "optional"],
                     help="for every scenario: 'optional' also passes a register that pins "
                          "nothing, raises nothing and leaves no error pending (default: each "
                          "scenario's own, 'required' unless it says otherwise)")
    run.add_argument("-k", dest="keyword", metavar="TEXT", help="only scenarios whose id "
                                                                 "contains TEXT")
    run.add_argument("--json", metavar="FILE", help="write the JSON report ('-' for stdout)")
    run.add_argument("--jobs", "-j", type=positive_int, default=1,
                     help="parallel worker processes (an integer >= 1)")
    run.add_argument("--trace", action="store_true", help="print the call trace of failures")
    add_run_extras(run)
    lst = sub.add_parser("list", help="list the scenarios (default: the bundled catalog)")
    lst.add_argument("paths", nargs="*", type=Path, metavar="PATH",
                     help="scenario files or folders; 'bundled' is kvreg's catalog")
    lst.add_argument("-k", dest="keyword", metavar="TEXT")


def scenario_paths(paths: Sequence[Path]) -> list[Path] | None:
    """The PATH arguments, with ``bundled`` (unless such a file exists) as kvreg's catalog."""
    if not paths:
        return None
    return [bundled_root() if str(p) == "bundled" and not p.exists() else p for p in paths]


def select(scenarios: Sequence[Scenario], keyword: str | None) -> list[Scenario]:
    if not keyword:
        return list(scenarios)
    return [s for s in scenarios if keyword in s.id]


def summary(results: Sequence[ScenarioResult]) -> dict[str, int]:
    count = {v: sum(1 for r in results if r.verdict == v) for v in ("pass", "fail", "error",
                                                                      "skip")}
    return {"total": len(results), "passed": count["pass"], "failed": count["fail"],
            "errors": count["error"], "skipped": count["skip"]}


def _worker(args: tuple[Scenario, Implementation, str]) -> ScenarioResult:
    sc, impl, backend = args
    return run_scenario(sc, impl, backend=backend)


def _run_all(scenarios: list[Scenario], impl: Implementation, jobs: int,
             progress: TextIO | None, backend: str = "fake") -> list[ScenarioResult]:
    results: list[ScenarioResult] = []
    total = len(scenarios)

    def tick(n: int) -> None:
        if progress is not None:
            progress.write(f"\r{n}/{total} scenarios")
            progress.flush()

    if jobs > 1 and total > 1:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            jobs_args = [(s, impl, backend) for s in scenarios]
            for i, res in enumerate(pool.map(_worker, jobs_args, chunksize=4), 1):
                results.append(res)
                tick(i)
    else:
        for i, sc in enumerate(scenarios, 1):
            results.append(run_scenario(sc, impl, backend=backend))
            tick(i)
    if progress is not None:
        progress.write("\r" + " " * 30 + "\r")
    return results


def _table(results: Sequence[ScenarioResult], out: TextIO, show_trace: bool) -> None:
    width = max((len(r.id) for r in results), default=10)
    for r in results:
        line = f"{r.id:<{width}}  {r.verdict.upper():<5}"
        if r.verdict != "pass":
            line += f"  {r.first_violation}"
        out.write(line + "\n")
        for w in r.warnings:
            out.write(f"    warning [{w.rule}] {w.message}\n")
        if show_trace and r.verdict == "fail" and r.trace_text:
            out.write("    " + r.trace_text.replace("\n", "\n    ") + "\n")
    s = summary(results)
    out.write(f"\n{s['passed']} passed, {s['failed']} failed"
              + (f", {s['errors']} errors" if s["errors"] else "")
              + (f", {s['skipped']} skipped" if s["skipped"] else "") + "\n")


def run_run(args: argparse.Namespace) -> int:
    try:
        plan = prepare(args)       # output paths and the baseline, before any work
        impl = make_implementation(args.impl, args.teardown, args.style, base=Path.cwd())
        impl.pinning = args.pinning
        scenarios = plan.select(select(load_paths(scenario_paths(args.paths)), args.keyword))
    except (ImplementationError, ScenarioError, UsageError) as exc:
        print(f"kvreg run: error: {exc}", file=sys.stderr)
        return 2
    if args.backend == "cuda":
        from kvreg.realhw.capabilities import detect

        missing = detect(rdma=False, torch=False).missing_reason("gpu")
        if missing:   # a GPU runner without a GPU must not go green by skipping everything
            print(f"kvreg run: error: --backend cuda needs a GPU: {missing}", file=sys.stderr)
            return 2
    if not scenarios:
        what = " and ".join(f"{k} {v}" for k, v in (("-k", args.keyword), ("--shard",
                                                                            args.shard)) if v)
        print(f"kvreg run: error: no scenario matches {what}", file=sys.stderr)
        return 2
    progress = sys.stderr if sys.stderr.isatty() and not os.environ.get("CI") else None
    jobs = 1 if args.backend == "cuda" else max(args.jobs, 1)   # one GPU, one run at a time
    results = _run_all(scenarios, impl, jobs, progress, args.backend)
    counts = summary(results)
    doc = {"summary": counts, "scenarios": [r.as_dict() for r in results]}
    if args.json == "-":
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        _table(results, sys.stdout, args.trace)
        if args.json:
            Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
    notes = sys.stderr if args.json == "-" else sys.stdout
    return finish(plan, results, notes, failed=counts["failed"] + counts["errors"])


def run_list(args: argparse.Namespace) -> int:
    try:
        scenarios = select(load_paths(scenario_paths(args.paths)), args.keyword)
    except ScenarioError as exc:
        print(f"kvreg list: error: {exc}", file=sys.stderr)
        return 2
    width = max((len(s.id) for s in scenarios), default=10)
    for s in scenarios:
        print(f"{s.id:<{width}}  {s.guards}")
    print(f"\n{len(scenarios)} scenarios")
    return 0
