"""Keep a seeded random sample of a cosmic-ray session's pending mutants; skip the rest.

A full run of a core module is several hundred mutants, each a fresh pytest process; on a
small shared machine that takes hours. A uniform sample estimates the score (docs/
mutation-testing.md gives the command and how to read the interval). Usage:

    python tools/mutation/sample.py SESSION.sqlite N [--seed S]
"""

from __future__ import annotations

import argparse
import random

from cosmic_ray.work_db import WorkDB, use_db
from cosmic_ray.work_item import WorkerOutcome, WorkResult


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("session")
    parser.add_argument("n", type=int)
    parser.add_argument("--seed", type=int, default=18)
    args = parser.parse_args()
    with use_db(args.session, WorkDB.Mode.open) as db:
        pending = sorted(item.job_id for item in db.pending_work_items)
        keep = set(random.Random(args.seed).sample(pending, min(args.n, len(pending))))
        for job_id in pending:
            if job_id not in keep:
                db.set_result(job_id, WorkResult(output="not in the sample",
                                                 worker_outcome=WorkerOutcome.SKIPPED))
    print(f"{len(keep)} of {len(pending)} pending mutants kept (seed {args.seed})")


if __name__ == "__main__":
    main()
