"""Run the README's test command and fail when its CPU grows past a ratio to a fixed workload.

The suite once took 19 minutes on a loaded 2-core machine (issue 25 §6); what brought it down
(expensive Hypothesis runs in a tier of their own, bytecode compiled once, faster catalog runs)
can quietly come back. A wall-clock limit would fail on any busy machine, so this measures
CPU, and in units of the same machine: a fixed pure-Python workload (the best of three runs,
in this process) before the command and after it, averaged; the command's CPU (its process
tree: every child it waited for, xdist workers and the kvreg processes tests start). The
command fails the check when its CPU exceeds ``--max-units`` workload units. On a pass
nothing is printed after the command, so its own last line (pytest's summary) stays the last
line of the log. Usage:

    python tools/suite_cost.py --max-units N [--report FILE] -- COMMAND [ARG ...]

Exit status: the command's when it fails; 1 when it passes but costs more than N units; 0
otherwise; 2 on bad input. ``--report FILE`` writes one line with the figures (for CI logs or
for choosing N: today's units times a margin for noise, in .ci/run).
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import time
from collections.abc import Sequence

# the workload unit: about 0.3 s of CPU on a 2-core CI machine
UNIT_ROUNDS = 2_000_000


def workload(rounds: int = UNIT_ROUNDS) -> float:
    """CPU seconds of a fixed mix of what the suite does most (calls, dicts, strings,
    sorting), the best of three runs."""
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        table: dict[str, int] = {}
        for i in range(rounds):
            key = f"k{i % 997}"
            table[key] = table.get(key, 0) + len(key)
        sorted(table.items(), key=lambda kv: (kv[1], kv[0]))
        best = min(best, time.process_time() - start)
    return max(best, 1e-6)


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def check(command: Sequence[str], max_units: float, rounds: int = UNIT_ROUNDS,
          report: str | None = None) -> int:
    """Run ``command``; its exit status, or 1 when it passed but cost more than
    ``max_units`` workload units."""
    first = workload(rounds)
    before = children_cpu()
    rc = subprocess.call(list(command))
    cpu = children_cpu() - before
    # the unit measured before and after the command, averaged: a shared machine's speed
    # drifts over a run of minutes (one CI run measured 0.312 s at its start while the
    # machine slowed during it, and counted the same suite 4 % over its limit)
    last = workload(rounds)
    unit = (first + last) / 2
    units = cpu / unit
    line = (f"suite cost: {cpu:.1f} s CPU = {units:.0f} units of {unit:.3f} s ({first:.3f} s "
            f"before, {last:.3f} s after; limit {max_units:g} units)")
    if report:
        with open(report, "w", encoding="utf-8") as out:
            out.write(line + "\n")
    if rc != 0:
        return rc
    if units > max_units:
        print(f"{line}: the test command got slower; see which tests with "
              "--durations=30 and bring it back", file=sys.stderr)
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="suite_cost.py", description=__doc__.split("\n")[0])
    parser.add_argument("--max-units", type=float, required=True,
                        help="the most CPU the command may take, in workload units")
    parser.add_argument("--report", help="write the figures to this file")
    parser.add_argument("--rounds", type=int, default=UNIT_ROUNDS, help=argparse.SUPPRESS)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command after --")
    if args.max_units <= 0 or args.rounds <= 0:
        parser.error("--max-units and --rounds must be positive")
    return check(command, args.max_units, args.rounds, args.report)


if __name__ == "__main__":
    sys.exit(main())
