"""The score of a cosmic-ray session: killed / (killed + surviving non-equivalent mutants).

cosmic-ray's own ``cr-rate`` counts skipped mutants (operator filter, sample) as run. Mutants
known to be equivalent (no program can tell them from the original: an annotation under
``from __future__ import annotations``, an unused default) are listed in ``equivalent.txt``
beside this file as ``path | operator | column | the original line, stripped`` (no line
number, so the list survives edits elsewhere in the file). Usage:

    python tools/mutation/score.py SESSION.sqlite [--list]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cosmic_ray.work_db import WorkDB, use_db
from cosmic_ray.work_item import TestOutcome, WorkerOutcome

HERE = Path(__file__).resolve().parent


def equivalents() -> set[str]:
    lines = (HERE / "equivalent.txt").read_text().splitlines()
    return {ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")}


def key(path: str, operator: str, row: int, col: int) -> str:
    line = Path(path).read_text().splitlines()[row - 1]
    indent = len(line) - len(line.lstrip())
    return f"{path} | {operator} | {col - indent} | {line.strip()}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("session")
    parser.add_argument("--list", action="store_true", help="print every surviving mutant")
    args = parser.parse_args()
    known = equivalents()
    killed = survived = equivalent = other = 0
    left: list[str] = []
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
            k = key(str(m.module_path), m.operator_name, m.start_pos[0], m.start_pos[1])
            if k in known:
                equivalent += 1
            else:
                survived += 1
                left.append(k)
    judged = killed + survived
    rate = 100.0 * killed / judged if judged else 0.0
    print(f"{killed} killed, {survived} survived, {equivalent} equivalent, {other} other: "
          f"{rate:.1f} % of {judged} non-equivalent mutants killed")
    if args.list:
        for k in sorted(left):
            print(f"  {k}")


if __name__ == "__main__":
    main()
