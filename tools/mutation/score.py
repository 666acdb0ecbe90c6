"""The score of a cosmic-ray session: killed / (killed + surviving non-equivalent mutants).

cosmic-ray's own ``cr-rate`` counts skipped mutants (operator filter, sample) as run. Mutants
known to be equivalent (no program can tell them from the original: an annotation under
``from __future__ import annotations``, an unused default) are listed in ``equivalent.txt``
beside this file by content (keys.key: ``path | operator | `text` #k | the line, stripped``;
no line number or column, so the list survives edits elsewhere in the file). The score is
given with its 95 % Wilson interval, the honest statement of a sample's score. Usage:

    python tools/mutation/score.py SESSION.sqlite [--list]
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from cosmic_ray.work_db import WorkDB, use_db
from cosmic_ray.work_item import TestOutcome, WorkerOutcome
from keys import key

HERE = Path(__file__).resolve().parent


def equivalents() -> set[str]:
    lines = (HERE / "equivalent.txt").read_text().splitlines()
    return {ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")}


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """The 95 % Wilson score interval of k successes in n trials, in percent."""
    if n == 0:
        return 0.0, 100.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return 100 * max(0.0, centre - half), 100 * min(1.0, centre + half)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("session")
    parser.add_argument("--list", action="store_true", help="print every surviving mutant")
    args = parser.parse_args()
    known = equivalents()
    killed = survived = equivalent = other = 0
    left: list[str] = []
    sources: dict[str, list[str]] = {}
    with use_db(args.session, WorkDB.Mode.open) as db:
        for item, result in db.completed_work_items:
            if result.worker_outcome == WorkerOutcome.SKIPPED:
                continue
            if result.test_outcome == TestOutcome.KILLED:
                killed += 1
                continue
            if result.test_outcome != TestOutcome.SURVIVED:
                other += 1              # incompetent mutants, worker errors
                continue
            m = item.mutations[0]
            path = str(m.module_path)
            if path not in sources:
                sources[path] = Path(path).read_text().splitlines()
            k = key(m, sources[path])
            if k in known:
                equivalent += 1
            else:
                survived += 1
                left.append(f"line {m.start_pos[0]}: {k}")
    judged = killed + survived
    rate = 100.0 * killed / judged if judged else 0.0
    low, high = wilson(killed, judged)
    print(f"{killed} killed, {survived} survived, {equivalent} equivalent, {other} other: "
          f"{rate:.1f} % of {judged} non-equivalent mutants killed "
          f"(95 % Wilson interval {low:.1f}–{high:.1f})")
    if args.list:
        for k in sorted(left, key=lambda s: int(s.split(":")[0].split()[1])):
            print(f"  {k}")


if __name__ == "__main__":
    main()
