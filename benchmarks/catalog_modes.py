"""The bundled catalog against the reference in one execution mode; prints a JSON line.

Modes: ``isolated`` (supervised workers, what ``kvreg run`` does) and ``in-process`` (no
supervision: serially in this process, or with ``--jobs 2`` in a ``ProcessPoolExecutor`` as
``kvreg run -j 2`` did before isolation, four scenarios per task). Wall time and the CPU time
of this process and its workers are measured from after the catalog is loaded
(``process_cpu_s``: from the interpreter's start, torch's import and the catalog's load
included, what ``kvreg run`` costs as a whole). ``--impl`` (with ``--style``) measures an
implementation of the user's instead of kvreg's reference.
"""

from __future__ import annotations

import argparse
import json
import resource
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["isolated", "in-process"])
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--impl", default=None)
    parser.add_argument("--style", default=None)
    args = parser.parse_args()
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
