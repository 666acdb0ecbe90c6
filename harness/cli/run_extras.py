"""What ``kvreg run`` does around the runs: baselines, shards, JUnit XML, early path checks.

Everything a team needs to put kvreg in CI on code with known failures: ``--baseline FILE``
fails only on failures the file does not record (and lists the recorded ones that went away),
``--write-baseline FILE`` records the current ones, ``--shard K/N`` runs one part of a CI
matrix, ``--junit-xml FILE`` writes a report CI systems display. Every output path is checked
before the first scenario runs.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any, TextIO, TypeVar

from kvreg.harness.run.baseline import (
    Baseline,
    BaselineError,
    compare,
    load_baseline,
    write_baseline,
)
from kvreg.harness.run.causes import causes
from kvreg.harness.run.sharding import Shard, ShardError, parse_shard, shard_of

from .arguments import UsageError, check_output_path
from .junit_xml import write_junit

__all__ = ["RunPlan", "add_run_extras", "finish", "prepare"]

T = TypeVar("T")


def add_run_extras(run: argparse.ArgumentParser) -> None:
    """The CI options of ``kvreg run``."""
    known = run.add_mutually_exclusive_group()
    known.add_argument("--baseline", metavar="FILE",
                       help="known failures ('<scenario id> <rule>' per line): fail only on "
                            "others, and report recorded ones that no longer fail")
    known.add_argument("--write-baseline", metavar="FILE",
                       help="record this run's failures as the baseline FILE (exit 0)")
    run.add_argument("--junit-xml", metavar="FILE", help="write a JUnit XML report")
    run.add_argument("--shard", metavar="K/N", type=_shard,
                     help="run part K of N (deterministic, balanced by expected cost; for "
                          "CI matrices)")


def _shard(text: str) -> Shard:
    try:
        return parse_shard(text)
    except ShardError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix(f"--shard {text!r}: ")) from None


class RunPlan:
    """The checked extras of one ``kvreg run``: what to load, select and write."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.baseline: Baseline | None = None
        self.baseline_path: str | None = getattr(args, "baseline", None)
        self.write_baseline_path: str | None = getattr(args, "write_baseline", None)
        self.junit_path: str | None = getattr(args, "junit_xml", None)
        self.shard: Shard | None = getattr(args, "shard", None)

    def select(self, scenarios: Sequence[T]) -> list[T]:
        """This shard's scenarios (all of them without --shard)."""
        if self.shard is None:
            return list(scenarios)
        return shard_of(scenarios, self.shard)  # type: ignore[type-var]


def prepare(args: argparse.Namespace) -> RunPlan:
    """Check every output path and read the baseline; UsageError before any work."""
    check_output_path(getattr(args, "json", None), "--json", stdout_ok=True)
    check_output_path(getattr(args, "junit_xml", None), "--junit-xml")
    check_output_path(getattr(args, "write_baseline", None), "--write-baseline")
    plan = RunPlan(args)
    if plan.baseline_path is not None:
        try:
            plan.baseline = load_baseline(plan.baseline_path)
        except BaselineError as exc:
            raise UsageError(f"--baseline {exc}") from None
    return plan


def finish(plan: RunPlan, results: Sequence[Any], out: TextIO, *, failed: int) -> int:
    """Write the baseline / JUnit files, tell the user, and return the exit code."""
    known: set[str] = set()
    code = 1 if failed else 0
    if plan.baseline is not None:
        outcome = compare(results, plan.baseline)
        known = {sid for sid, _ in outcome.known}
        for line in outcome.lines():
            if not line.startswith("known failure"):
                out.write(line + "\n")
        out.write(f"baseline {plan.baseline_path}: {len(outcome.known)} scenario(s) fail as "
                  f"recorded, {len(outcome.new)} new failure(s), {len(outcome.fixed)} recorded "
                  "failure(s) gone\n")
        code = 0 if outcome.ok else 1
    if plan.write_baseline_path is not None:
        n = write_baseline(plan.write_baseline_path, results)
        out.write(f"kvreg run: wrote {n} known failure(s) to {plan.write_baseline_path}\n")
        code = 0
    if plan.junit_path is not None:
        write_junit(plan.junit_path, results, known=known, causes=causes(results))
    return code
