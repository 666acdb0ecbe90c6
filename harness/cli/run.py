"""``kvreg run`` and ``kvreg list``: the catalog against an implementation, as a table or JSON.

Exit codes (public contract): 0 all selected scenarios pass; 1 at least one fails or errors;
2 usage error or invalid scenario file (the message names the file and field; no
traceback); 3 kvreg itself broke on at least one scenario (an ``internal-error`` verdict,
with its traceback: a bug in kvreg to report, never a verdict on the code under test);
130 interrupted by Ctrl-C (the report is still written, complete: the scenarios not
finished are ``skip`` with the reason). Each scenario runs in a supervised worker
process (kvreg.harness.run.supervisor) under a time and a memory limit.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from kvreg.harness.run.catalog import restore_sigint, run_catalog, write_atomic
from kvreg.harness.run.causes import causes, hints, render_causes
from kvreg.harness.run.endstate import undrainable
from kvreg.harness.run.implementation import (
    Implementation,
    ImplementationError,
    make_implementation,
)
from kvreg.harness.run.limits import (
    DEFAULT_MEMORY,
    DEFAULT_TIMEOUT_S,
    Limits,
    format_size,
    parse_size,
    parse_timeout,
)
from kvreg.harness.run.result import INTERNAL_ERROR, REPORT_REQUEST, ScenarioResult
from kvreg.harness.run.supervisor import Supervisor
from kvreg.harness.run.targets import user_styles
from kvreg.harness.scenario.format import Scenario, ScenarioError, bundled_root, load_paths

from .arguments import UsageError, positive_int
from .pipes import reader_safe
from .progress import make_reporter
from .run_extras import RunPlan, add_run_extras, finish, prepare

__all__ = ["EXIT_INTERNAL_ERROR", "add_parsers", "run_list", "run_run", "scenario_paths",
           "select", "summary"]

EXIT_INTERNAL_ERROR = 3   # kvreg broke: distinct from 1, so CI shows kvreg's bug as kvreg's
EXIT_CODES = ("exit status: 0 every selected scenario passes (or fails only as --baseline "
              "records); 1 a scenario fails or errors; 2 usage error or invalid scenario "
              f"file; {EXIT_INTERNAL_ERROR} kvreg itself broke (an internal-error verdict: "
              "please report it); 130 interrupted")


def add_parsers(sub: Any) -> None:
    run = sub.add_parser("run", help="run scenarios against an implementation (default: the "
                                     "bundled catalog against kvreg's reference)",
                         epilog=EXIT_CODES)
    run.add_argument("paths", nargs="*", type=Path, metavar="PATH",
                     help="scenario files or folders; 'bundled' is kvreg's catalog (the "
                          "default when no PATH is given)")
    run.add_argument("--impl", metavar="SPEC", help="file.py:function or package.module:function")
    run.add_argument("--teardown", metavar="SPEC", help="teardown function (default: "
                                                        "'teardown' next to --impl)")
    run.add_argument("--style", choices=user_styles(),
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
                     help="parallel worker processes (an integer >= 1; default 1)")
    run.add_argument("--quiet", "-q", action="store_true",
                     help="no progress on stderr (default: a counter on a terminal, a line "
                          "per 10%% of the scenarios or every 5 s elsewhere, e.g. in CI logs)")
    run.add_argument("--trace", action="store_true", help="print the call trace of failures")
    add_run_extras(run)
    run.add_argument("--timeout", type=_arg(parse_timeout), default=DEFAULT_TIMEOUT_S,
                     metavar="S", help="wall-clock seconds one scenario may run before it is "
                     f"stopped and reported as an error (default {DEFAULT_TIMEOUT_S:g})")
    run.add_argument("--memory-limit", type=_arg(parse_size), default=DEFAULT_MEMORY,
                     metavar="SIZE", help="memory one scenario may allocate (growth of its "
                     "worker's data segment, e.g. 512M, 4G) before it is stopped and reported "
                     f"as an error (default {format_size(DEFAULT_MEMORY).replace(' ', '')})")
    run.add_argument("--in-process", action="store_true",
                     help="debugging: run the implementation in kvreg's own process, one "
                     "scenario at a time (a debugger can stop in it; a crash ends kvreg)")
    lst = sub.add_parser("list", help="list the scenarios (default: the bundled catalog)")
    lst.add_argument("paths", nargs="*", type=Path, metavar="PATH",
                     help="scenario files or folders; 'bundled' is kvreg's catalog")
    lst.add_argument("-k", dest="keyword", metavar="TEXT")
    lst.add_argument("--rules", action="store_true",
                     help="list the rules a run is judged by instead (harness/run/rules.py); "
                          "-k selects them by name")


def scenario_paths(paths: Sequence[Path]) -> list[Path] | None:
    """The PATH arguments, with ``bundled`` (unless such a file exists) as kvreg's catalog."""
    if not paths:
        return None
    return [bundled_root() if str(p) == "bundled" and not p.exists() else p for p in paths]


def _arg(parse: Any) -> Any:
    """An argparse type from a parser that raises ValueError with the expectation."""
    def convert(text: str) -> Any:
        try:
            return parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    convert.__name__ = parse.__name__
    return convert


def select(scenarios: Sequence[Scenario], keyword: str | None) -> list[Scenario]:
    if not keyword:
        return list(scenarios)
    return [s for s in scenarios if keyword in s.id]


def summary(results: Sequence[ScenarioResult]) -> dict[str, int]:
    """The report's counts; kvreg's internal errors are errors, also counted on their own
    (``internal_errors``, present only when there are some)."""
    count = {v: sum(1 for r in results if r.verdict == v) for v in ("pass", "fail", "error",
                                                                      "skip", INTERNAL_ERROR)}
    out = {"total": len(results), "passed": count["pass"], "failed": count["fail"],
           "errors": count["error"] + count[INTERNAL_ERROR], "skipped": count["skip"]}
    if count[INTERNAL_ERROR]:
        out["internal_errors"] = count[INTERNAL_ERROR]
    return out


def _run_all(scenarios: list[Scenario], impl: Implementation, jobs: int,
             progress: TextIO | None, backend: str = "fake", limits: Limits | None = None,
             in_process: bool = False, quiet: bool = False,
             supervisor: Supervisor | None = None) -> tuple[list[ScenarioResult], bool]:
    """Every scenario's result in selection order, and whether Ctrl-C stopped the run;
    how far it got goes to ``progress`` (:mod:`.progress`; None: nowhere)."""
    reporter = make_reporter(progress or sys.stderr, len(scenarios),
                             quiet=quiet or progress is None)
    run = run_catalog(scenarios, impl, jobs=jobs, limits=limits, backend=backend,
                      in_process=in_process, tick=reporter.tick, supervisor=supervisor)
    reporter.close()
    return run.results, run.interrupted


def _table(results: Sequence[ScenarioResult], out: TextIO, show_trace: bool,
           notes: Sequence[str] = (), contract: str = "") -> None:
    """The causes block and the hints first (what to fix), then one line per scenario, the
    contract the implementation was judged by and the counts. A warning the same for every
    implementation (an error torch's binding cannot drain) is one hint, not a line each."""
    block = render_causes(causes(results))
    for line in block:
        out.write(line + "\n")
    for note in notes:
        out.write(f"hint: {note}\n")
    if block or notes:
        out.write("\n")
    width = max((len(r.id) for r in results), default=10)
    for r in results:
        line = f"{r.id:<{width}}  {r.verdict.upper():<5}"
        if r.verdict != "pass":
            first = r.violations[0] if r.violations else None
            line += f"  {r.first_violation}"
            if first is not None and first.count > 1:
                line += f" (x{first.count})"
        out.write(line + "\n")
        for w in r.warnings:
            if undrainable(w):
                continue
            out.write(f"    warning [{w.rule}] {w.message}"
                      + (f" (x{w.count})" if w.count > 1 else "") + "\n")
        if show_trace and r.verdict == "fail" and r.trace_text:
            out.write("    " + r.trace_text.replace("\n", "\n    ") + "\n")
        if r.verdict == INTERNAL_ERROR and r.tb:
            out.write("    " + r.tb.replace("\n", "\n    ") + "\n")
    s = summary(results)
    if contract:
        out.write(f"\n{contract}")
    inside = s.get("internal_errors", 0)
    out.write(f"\n{s['passed']} passed, {s['failed']} failed"
              + (f", {s['errors']} errors" if s["errors"] else "")
              + (f" ({inside} of them kvreg internal errors)" if inside else "")
              + (f", {s['skipped']} skipped" if s["skipped"] else "") + "\n")
    if inside:
        out.write(f"kvreg internal error in {inside} scenario(s): {REPORT_REQUEST}\n")


def run_run(args: argparse.Namespace) -> int:
    try:
        plan = prepare(args)       # output paths and the baseline, before any work
        impl = make_implementation(args.impl, args.teardown, args.style, base=Path.cwd())
        impl.pinning = args.pinning
    except (ImplementationError, ScenarioError, UsageError) as exc:
        print(f"kvreg run: error: {exc}", file=sys.stderr)
        return 2
    early = _early_supervisor(args, impl)
    try:
        return _run_planned(args, plan, impl, early)
    finally:
        if early is not None:
            early.close()


def _early_supervisor(args: argparse.Namespace, impl: Implementation) -> Supervisor | None:
    """A supervised run's workers, started before the scenarios are loaded: they import
    torch meanwhile (:meth:`Supervisor.start_early`). None for ``--in-process`` and for the
    real backend (one GPU run at a time, started as before)."""
    if args.in_process or args.backend != "fake":
        return None
    supervisor = Supervisor(impl, backend=args.backend, limits=_limits(args),
                            jobs=max(args.jobs, 1))
    supervisor.start_early()
    return supervisor


def _limits(args: argparse.Namespace) -> Limits:
    return Limits(timeout=args.timeout, memory=args.memory_limit)


def _run_planned(args: argparse.Namespace, plan: RunPlan, impl: Implementation,
                 early: Supervisor | None) -> int:
    try:
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
    if args.in_process and args.jobs > 1:
        print("kvreg run: error: --in-process runs one scenario at a time in this process; "
              f"-j {args.jobs} needs worker processes", file=sys.stderr)
        return 2
    jobs = 1 if args.backend == "cuda" else max(args.jobs, 1)   # one GPU, one run at a time
    results, interrupted = _run_all(scenarios, impl, jobs, sys.stderr, args.backend,
                                    _limits(args), args.in_process, quiet=args.quiet,
                                    supervisor=early)
    counts = summary(results)
    advice = hints(results, pinning=args.pinning, style=impl.style)
    doc = {"summary": counts, "contract": impl.contract.as_dict(),
           "causes": [c.as_dict() for c in causes(results)],
           "hints": advice, "scenarios": [r.as_dict() for r in results]}
    out = reader_safe()       # `kvreg run | head`: the files below are written all the same
    try:
        if args.json == "-":
            out.write(json.dumps(doc, indent=2) + "\n")
        else:
            _table(results, out, args.trace, advice, impl.contract.text())
            if args.json:
                write_atomic(Path(args.json), json.dumps(doc, indent=2) + "\n")
        out.flush()
        notes = sys.stderr if args.json == "-" else out
        if interrupted:
            # an interrupted run records no baseline: only the reports are written
            plan.write_baseline_path = None
        code = finish(plan, results, notes, failed=counts["failed"] + counts["errors"])
        out.flush()
    finally:
        restore_sigint()
    if interrupted:
        print("kvreg run: interrupted (Ctrl-C): the scenarios not finished are reported as "
              "skipped", file=sys.stderr)
        return 130
    if counts.get("internal_errors"):
        print(f"kvreg run: kvreg itself broke on {counts['internal_errors']} scenario(s) "
              f"(exit {EXIT_INTERNAL_ERROR}); {REPORT_REQUEST}", file=sys.stderr)
        return EXIT_INTERNAL_ERROR
    return code


def run_list(args: argparse.Namespace) -> int:
    if getattr(args, "rules", False):
        return _list_rules(args)
    try:
        scenarios = select(load_paths(scenario_paths(args.paths)), args.keyword)
    except ScenarioError as exc:
        print(f"kvreg list: error: {exc}", file=sys.stderr)
        return 2
    width = max((len(s.id) for s in scenarios), default=10)
    out = reader_safe()
    for s in scenarios:
        out.write(f"{s.id:<{width}}  {s.guards}\n")
    out.write(f"\n{len(scenarios)} scenarios\n")
    out.flush()
    return 0


def _list_rules(args: argparse.Namespace) -> int:
    """``kvreg list --rules``: every rule of the registry, what it reports, its targets, the
    contract it judges and what it asks."""
    from kvreg.harness.run.rules import all_rules

    if args.paths:
        print("kvreg list: error: --rules takes no PATH", file=sys.stderr)
        return 2
    rules = [r for r in all_rules() if not args.keyword or args.keyword in r.name]
    width = max((len(r.name) for r in rules), default=10)
    out = reader_safe()
    for r in rules:
        contract = f"  contract: {r.contract}" if r.contract else ""
        out.write(f"{r.name:<{width}}  {r.severity}  [{', '.join(r.targets)}]{contract}\n"
                  f"{'':<{width}}  {r.summary}\n")
    out.write(f"\n{len(rules)} rules\n")
    out.flush()
    return 0
