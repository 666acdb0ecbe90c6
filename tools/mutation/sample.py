"""Keep a seeded random sample of a cosmic-ray session's pending mutants; skip the rest.

A full run of a core module is several hundred mutants, each a fresh pytest process; on a
small shared machine that takes hours. A uniform sample estimates the score (docs/
mutation-testing.md gives the command and how to read the interval). The mutants are drawn
in the order of their place in the file (keys.position), not by cosmic-ray's job ids (random
on every ``init``): the same seed on the same version of the module names the same sample on
any machine. Usage:

    python tools/mutation/sample.py SESSION.sqlite N [--seed S] [--list]
"""

from __future__ import annotations

import argparse
import random

from cosmic_ray.work_db import WorkDB, use_db
from cosmic_ray.work_item import WorkerOutcome, WorkResult
from keys import blob, key, position


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("session")
    parser.add_argument("n", type=int)
    parser.add_argument("--seed", type=int, default=18)
    parser.add_argument("--list", action="store_true", help="print the kept mutants")
    args = parser.parse_args()
    with use_db(args.session, WorkDB.Mode.open) as db:
        pending = sorted(db.pending_work_items, key=lambda item: position(item.mutations[0]))
        paths = sorted({str(item.mutations[0].module_path) for item in pending})
        keep = {item.job_id for item in
                random.Random(args.seed).sample(pending, min(args.n, len(pending)))}
        for item in pending:
            if item.job_id not in keep:
                db.set_result(item.job_id, WorkResult(output="not in the sample",
                                                      worker_outcome=WorkerOutcome.SKIPPED))
    if args.list:
        for item in pending:
            if item.job_id in keep:
                print(f"  line {item.mutations[0].start_pos[0]}: {key(item.mutations[0])}")
    names = ", ".join(f"{p} (blob {blob(p)[:12]})" for p in paths)
    print(f"{len(keep)} of {len(pending)} pending mutants kept (seed {args.seed}) of {names}")


if __name__ == "__main__":
    main()
