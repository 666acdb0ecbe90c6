"""The bundled catalog against the reference in one execution mode; prints a JSON line.

Modes: ``isolated`` (supervised workers, what ``kvreg run`` does) and ``in-process`` (no
supervision: serially in this process, or with ``--jobs 2`` in a ``ProcessPoolExecutor`` as
``kvreg run -j 2`` did before isolation, four scenarios per task). Wall time and the CPU time
of this process and its workers are measured from after the catalog is loaded
(``process_cpu_s``: from the interpreter's start, torch's import and the catalog's load
included, what ``kvreg run`` costs as a whole). ``command`` runs ``kvreg run`` itself as a
user types it (``--jobs N``; ``--jobs 0``: ``--in-process``), timed from its start to its
exit: the interpreter, torch's import, the catalog's load and the report included (what the
README's times and the "under 5 s at -j 1" target are). ``--impl`` (with ``--style``)
measures an implementation of the user's instead of kvreg's reference.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor

from kvreg.harness.run.core import run_scenario
from kvreg.harness.run.implementation import Implementation, make_implementation
from kvreg.harness.run.limits import Limits
from kvreg.harness.run.result import ScenarioResult
from kvreg.harness.run.supervisor import Supervisor
from kvreg.harness.run.worker import run_in_process
from kvreg.harness.scenario import Scenario, load_paths


def _one(args: tuple[Scenario, Implementation]) -> ScenarioResult:
    return run_scenario(*args)


def _cpu() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _children_cpu() -> float:
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return kids.ru_utime + kids.ru_stime


def _command(args: argparse.Namespace) -> dict[str, object]:
    """``kvreg run`` as a whole, in a process of its own; its verdicts from its JSON report."""
    how = ["--in-process"] if args.jobs == 0 else ["-j", str(args.jobs)]
    mine = [*(["--impl", args.impl] if args.impl else []),
            *(["--style", args.style] if args.style else [])]
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.json")
        t0, c0 = time.perf_counter(), _children_cpu()
        subprocess.run([sys.executable, "-m", "kvreg.harness.cli", "run", "-q", *how, *mine,
                        "--json", report], stdout=subprocess.DEVNULL, check=False)
        wall, cpu = time.perf_counter() - t0, _children_cpu() - c0
        with open(report) as f:
            verdicts = [r["verdict"] for r in json.load(f)["scenarios"]]
    return {"mode": "command", "jobs": args.jobs, "wall_s": wall, "cpu_s": cpu,
            "process_cpu_s": cpu, "total": len(verdicts),
            "passed": verdicts.count("pass"), "verdicts": verdicts, "workers": 0}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["isolated", "in-process", "command"])
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--impl", default=None)
    parser.add_argument("--style", default=None)
    args = parser.parse_args()
    if args.mode == "command":
        print(json.dumps(_command(args)))
        return
    scenarios = load_paths()
    impl = make_implementation(args.impl, None, args.style)
    import torch.cuda  # noqa: F401  (both modes pay torch's import before the clock starts)

    t0, c0 = time.perf_counter(), _cpu()
    workers = 0
    if args.mode == "isolated":
        with Supervisor(impl, jobs=args.jobs) as sup:
            results = [r for _, r in sup.run(scenarios)]
            workers = sup.started
    elif args.jobs > 1:
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            results = list(pool.map(_one, [(s, impl) for s in scenarios], chunksize=4))
    else:   # as ``kvreg run --in-process`` runs them
        results = [run_in_process(s, impl, "fake", Limits()) for s in scenarios]
    wall, cpu = time.perf_counter() - t0, _cpu() - c0
    verdicts = [r.verdict for r in results]
    print(json.dumps({"mode": args.mode, "jobs": args.jobs, "wall_s": wall, "cpu_s": cpu,
                      "process_cpu_s": _cpu(),
                      "total": len(results), "passed": verdicts.count("pass"),
                      "verdicts": verdicts, "workers": workers}))


if __name__ == "__main__":
    main()
