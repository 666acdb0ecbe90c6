"""Compare two ``kvreg run --json`` reports scenario by scenario: what changed in each verdict.

A refactor that must not change what kvreg says about code (issue 26's "every verdict of the
catalog ... is unchanged") is proved by running the same implementations on the catalog before
and after it and comparing the reports. This compares, for each scenario id both reports hold,
the verdict, the violations and warnings (rule, message, where in the code), the order of the
violations' rules (not of two findings of one rule: those follow buffer addresses, which a
worker's earlier scenarios move), every other field of the entry, and the report's contract,
after normalising what differs between two runs without meaning anything: absolute paths (the
checkout's place) become their file name, durations ``<T>``, absolute addresses the code under
test printed (mmap's placement differs in every run) ``<ADDR>``. Scenarios only one report
holds are counted per top-level catalog folder (``mha``, ``regressions``, ...). Usage:

    python tools/compare_reports.py BEFORE AFTER [--limit N]

BEFORE and AFTER are two report files, or two folders of reports paired by file name (a name
in only one folder is listed, not compared). Prints one line per differing scenario and field
(``impl  scenario  field: before -> after``) and a summary line per pair and in all. Exit
status 0 when every common scenario is identical, 1 when any differs, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# an absolute path (a checkout, a temporary folder): only its last part says anything
_PATH = re.compile(r"(?<![\w.])/(?:[\w.+-]+/)+([\w.+-]+)")
# a measured duration: "12.3 s", "0.5s", "340 ms"
_TIME = re.compile(r"\b\d+(?:\.\d+)?\s?(?:ms|s)\b")
# an absolute address (12+ hex digits: where mmap placed a buffer, different in every run) that
# code under test printed; kvreg's own words are offsets (kv_buffer+0x7f998000), kept
_ADDRESS = re.compile(r"(?<![+\w])0x[0-9a-fA-F]{12,}\b")
# the fields shown first; any other field of a scenario entry is compared too
FIELDS = ("verdict", "violations", "rule order", "warnings", "reason")
# the pseudo-id under which the report's contract is compared (its causes and hints count
# scenarios, so new scenarios change them: what they say is compared per scenario)
REPORT = "(report)"
REPORT_FIELDS = ("contract",)


class BadInput(Exception):
    """A report that cannot be read or is not a kvreg JSON report."""


def normalise(text: str) -> str:
    """``text`` without what two runs of the same code may word differently."""
    return _ADDRESS.sub("<ADDR>", _TIME.sub("<T>", _PATH.sub(r"\1", text)))


def _finding(item: Any) -> str:
    """A violation or warning as one line: rule, message and where in the code it happened."""
    if not isinstance(item, dict):
        return normalise(json.dumps(item, sort_keys=True))
    line = f"{item.get('rule', '?')}: {normalise(str(item.get('message', '')))}"
    if "where" in item or "code" in item:
        line += f" [at {normalise(str(item.get('where', '')))}: {item.get('code', '')}]"
    return line


def scenario_view(entry: dict[str, Any]) -> dict[str, Any]:
    """The fields of one scenario entry, normalised: violations and warnings as sorted lines
    and the violations' rules in order; any other field (``pool``, ``copy``, ``ranks``, ...)
    as normalised JSON."""
    violations = entry.get("violations") or []
    view: dict[str, Any] = {"verdict": entry.get("verdict"),
                            "violations": sorted(map(_finding, violations)),
                            # the first rule is the one a user reads first
                            "rule order": [v.get("rule") if isinstance(v, dict) else v
                                           for v in violations],
                            "warnings": sorted(map(_finding, entry.get("warnings") or [])),
                            "reason": normalise(str(entry.get("reason", "")))}
    for key, value in entry.items():
        if key not in view and key != "id":
            view[key] = normalise(json.dumps(value, sort_keys=True))
    return view


def load_report(path: Path) -> dict[str, dict[str, Any]]:
    """The scenarios of a report by id; BadInput names the file and what is wrong."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInput(f"{path}: cannot read a JSON report ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("scenarios"), list):
        raise BadInput(f"{path}: not a kvreg report (no 'scenarios' list)")
    out: dict[str, dict[str, Any]] = {}
    for entry in doc["scenarios"]:
        if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
            raise BadInput(f"{path}: a scenario entry without an 'id'")
        out[entry["id"]] = scenario_view(entry)
    out[REPORT] = {k: normalise(json.dumps(doc.get(k), sort_keys=True)) for k in REPORT_FIELDS}
    return out


@dataclass
class Comparison:
    """One pair of reports compared."""

    name: str
    common: int = 0
    identical: int = 0
    # (scenario id, field, before, after)
    differences: list[tuple[str, str, Any, Any]] = field(default_factory=list)
    only_before: Counter[str] = field(default_factory=Counter)
    only_after: Counter[str] = field(default_factory=Counter)

    @property
    def differing(self) -> int:
        """Common scenarios that differ (the report's own fields are not a scenario)."""
        return len({sid for sid, *_ in self.differences} - {REPORT})


def folder(sid: str) -> str:
    return sid.split("/", 1)[0]


def compare(name: str, before: dict[str, dict[str, Any]],
            after: dict[str, dict[str, Any]]) -> Comparison:
    result = Comparison(name)
    for sid in sorted(before.keys() | after.keys()):
        if sid == REPORT:
            result.differences.extend((sid, f, before[sid].get(f), after[sid].get(f))
                                      for f in REPORT_FIELDS
                                      if before[sid].get(f) != after[sid].get(f))
        elif sid not in after:
            result.only_before[folder(sid)] += 1
        elif sid not in before:
            result.only_after[folder(sid)] += 1
        else:
            result.common += 1
            b, a = before[sid], after[sid]
            names = [*FIELDS, *sorted((b.keys() | a.keys()) - set(FIELDS))]
            diffs = [(sid, f, b.get(f), a.get(f)) for f in names if b.get(f) != a.get(f)]
            result.differences.extend(diffs)
            result.identical += not diffs
    return result


def pairs(before: Path, after: Path) -> tuple[list[tuple[str, Path, Path]], list[str]]:
    """The report pairs to compare, and the names found on one side only."""
    if before.is_file() and after.is_file():
        return [(after.stem, before, after)], []
    if before.is_dir() and after.is_dir():
        b = {p.name: p for p in before.glob("*.json")}
        a = {p.name: p for p in after.glob("*.json")}
        both = sorted(b.keys() & a.keys())
        if not both:
            raise BadInput(f"no report name is in both {before} and {after}")
        return ([(Path(n).stem, b[n], a[n]) for n in both],
                sorted(b.keys() ^ a.keys()))
    raise BadInput(f"{before} and {after} must be two report files or two folders")


def _counts(c: Counter[str]) -> str:
    return ", ".join(f"{k} {n}" for k, n in sorted(c.items())) or "none"


def _short(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= 400 else text[:397] + "..."


def render(results: Sequence[Comparison], unpaired: Sequence[str], limit: int) -> list[str]:
    lines: list[str] = []
    for r in results:
        for sid, fld, b, a in r.differences[:limit]:
            lines.append(f"{r.name}  {sid}  {fld}: {_short(b)} -> {_short(a)}")
        if len(r.differences) > limit:
            lines.append(f"{r.name}  ... {len(r.differences) - limit} more difference(s)")
    for r in results:
        report = "; report fields differ" if any(d[0] == REPORT for d in r.differences) else ""
        lines.append(f"{r.name}: {r.common} common, {r.identical} identical, {r.differing} "
                     f"differing{report}; only after: {_counts(r.only_after)}; only before: "
                     f"{_counts(r.only_before)}")
    common = sum(r.common for r in results)
    same = sum(r.identical for r in results)
    lines.append(f"total: {len(results)} report pair(s), {common} scenario verdicts compared, "
                 f"{same} identical, {common - same} differing")
    lines.extend(f"unpaired report: {n}" for n in unpaired)
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--limit", type=int, default=50,
                        help="difference lines printed per report pair (default 50)")
    args = parser.parse_args(argv)
    try:
        found, unpaired = pairs(args.before, args.after)
        results = [compare(name, load_report(b), load_report(a)) for name, b, a in found]
    except BadInput as exc:
        print(f"compare_reports: {exc}", file=sys.stderr)
        return 2
    print("\n".join(render(results, unpaired, max(args.limit, 0))))
    return 1 if any(r.differences for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
