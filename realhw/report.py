"""The fidelity report: JSON for machines, FIDELITY.md for people, and a profile from either.

``fidelity.json`` holds everything a later run needs (capabilities, both outcomes of every
probe, the verdicts, the settled profile values, the measurement); ``FIDELITY.md`` is the
same report as tables — probe, fake, real, agree?, device, driver, date — followed by what
each probe settles, the documented divergences and the throughput figures.
:func:`profile_from_report` turns a real run back into a ``DeviceProfile``, so a fake run
tomorrow emulates the machine measured today.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kvreg.fakes.cuda.profile import DeviceProfile

from .capabilities import Capabilities, profile_for
from .mooncake_fidelity import mooncake_markdown

__all__ = ["JSON_NAME", "MD_NAME", "SVG_NAME", "load_report", "profile_from_report",
           "render_markdown", "validate_report", "write_report"]

JSON_NAME, MD_NAME, SVG_NAME = "fidelity.json", "FIDELITY.md", "throughput.svg"
VERDICTS = {"agree", "disagree", "skipped", "error"}
STATUSES = {"ok", "skipped", "error", "not run"}
_TOP = {"schema": int, "created": str, "machine": dict, "capabilities": dict, "real": dict,
        "fake_profile": dict, "settled": dict, "probes": list, "divergences": list,
        "summary": dict}


def validate_report(doc: Mapping[str, Any]) -> None:
    """Raise ValueError naming the first thing a fidelity report lacks or gets wrong."""
    for key, kind in _TOP.items():
        if not isinstance(doc.get(key), kind):
            raise ValueError(f"fidelity report: '{key}' must be a {kind.__name__}, got "
                             f"{type(doc.get(key)).__name__}")
    for family in ("cuda", "rdma"):
        entry = doc["real"].get(family)
        if not isinstance(entry, dict) or not isinstance(entry.get("ran"), bool):
            raise ValueError(f"fidelity report: real.{family}.ran must be a bool")
    counts = dict.fromkeys(VERDICTS, 0)
    for i, row in enumerate(doc["probes"]):
        where = f"probes[{i}] ({row.get('name', '?')})"
        for key in ("name", "family", "spec", "fake", "real", "verdict", "fields"):
            if key not in row:
                raise ValueError(f"fidelity report: {where} has no '{key}'")
        if row["verdict"] not in VERDICTS:
            raise ValueError(f"fidelity report: {where} verdict {row['verdict']!r} is not "
                             f"one of {sorted(VERDICTS)}")
        for side in ("fake", "real"):
            if row[side].get("status") not in STATUSES:
                raise ValueError(f"fidelity report: {where} {side}.status is "
                                 f"{row[side].get('status')!r}")
        counts[row["verdict"]] += 1
    for verdict, n in counts.items():
        if doc["summary"].get(verdict) != n:
            raise ValueError(f"fidelity report: summary.{verdict} is "
                             f"{doc['summary'].get(verdict)}, the rows say {n}")


def load_report(source: str | Path | Mapping[str, Any]) -> dict[str, Any]:
    """A report from a JSON file, a directory holding ``fidelity.json``, or a dict."""
    if isinstance(source, Mapping):
        doc = dict(source)
    else:
        path = Path(source)
        if path.is_dir():
            path = path / JSON_NAME
        doc = json.loads(path.read_text())
    validate_report(doc)
    return doc


def profile_from_report(source: str | Path | Mapping[str, Any]) -> DeviceProfile:
    """The DeviceProfile of the machine a real run measured: its facts plus settled values.

    ValueError when the report has no real CUDA run (a fake-only report settles nothing).
    """
    doc = load_report(source)
    real = doc["real"]["cuda"]
    if not real["ran"]:
        raise ValueError("the fidelity report has no real CUDA run "
                         f"({real.get('reason') or 'not run'}); nothing to build a profile from")
    caps = Capabilities.from_dict(doc["capabilities"])
    base = DeviceProfile.from_dict(doc["fake_profile"])
    profile = profile_for(caps, base)
    settled = dict(doc["settled"])
    notes = dict(profile.notes)
    for row in doc["probes"]:
        for name in row.get("settles", {}):
            notes.setdefault(name, f"settled by probe {row['name']} on {doc['created']}")
    for conflict in doc.get("settled_conflicts", []):
        notes[f"conflict:{conflict.split(':', 1)[0]}"] = conflict
    return profile.replace(**settled, notes=notes)


def _cell(value: Any) -> str:
    text: str = str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def _obs(outcome: Mapping[str, Any]) -> str:
    status = outcome.get("status")
    if status != "ok":
        return f"{status}: {outcome.get('reason', '')}"
    obs = outcome.get("observation", {})
    return ", ".join(f"{k}={v}" for k, v in obs.items()) or "(nothing recorded)"


def _agree(row: Mapping[str, Any]) -> str:
    verdict: str = row["verdict"]
    if verdict == "agree":
        return "yes"
    if verdict in ("skipped", "error"):
        return verdict
    res = row.get("resolution") or {}
    if res.get("kind") == "profile":
        fields = ", ".join(f"{k}={v!r}" for k, v in res.get("fields", {}).items())
        return f"no — fixed by the settled profile{f' ({fields})' if fields else ''}"
    if res.get("kind") == "divergence":
        return f"no — documented divergence `{res['name']}`"
    return f"**no — unexplained** ({row.get('why', '')})"


def render_markdown(doc: Mapping[str, Any]) -> str:
    """FIDELITY.md for one report."""
    m, real, s = doc["machine"], doc["real"], doc["summary"]
    device = m.get("device") or "no GPU"
    driver = m.get("driver")
    date = doc["created"][:10]

    def ran(family: str, yes: str) -> str:
        entry = real[family]
        return yes if entry["ran"] else "not run: " + _cell(entry["reason"])

    facts = ("the measured facts of this machine" if real["cuda"]["ran"]
             else "the documented defaults")
    lines = [
        "# kvreg fidelity report", "",
        "Each probe asks the fake CUDA runtime / fake verbs and the real machine the same "
        "question (docs/cuda-runtime.md §12, docs/mooncake-verbs.md §5) and compares the "
        "codes. The rows cite kvreg's behaviour reference (docs/ in kvreg's repository).",
        "", "| | |", "|---|---|",
        f"| date | {doc['created']} |",
        f"| machine | {_cell(m.get('describe'))} |",
        f"| real CUDA run | {ran('cuda', 'yes')} |",
        f"| real RDMA run | {ran('rdma', 'yes, on ' + str(real['rdma'].get('device')))} |",
        f"| fake profile | {doc['fake_profile'].get('name')} ({facts}; [UNC] switches at "
        "their defaults) |",
        "",
        f"**{s['total']} probes: {s['agree']} agree, {s['disagree']} disagree "
        f"({s['resolved_by_profile']} fixed by the settled profile, {s['divergence']} "
        f"documented divergences, {s['unexplained']} unexplained), {s['skipped']} skipped, "
        f"{s['error']} errors.**", "",
        "## Probes", "",
        "| probe | fake | real | agree? | device | driver | date |",
        "|---|---|---|---|---|---|---|",
    ]
    nic = m.get("nic") or "no RDMA device"
    kernel = f"kernel {m.get('kernel')}"
    for row in doc["probes"]:
        dev, drv = (nic, kernel) if row["family"] == "rdma" else (device, driver)
        lines.append(f"| {row['name']} | {_cell(_obs(row['fake']))} | {_cell(_obs(row['real']))}"
                     f" | {_cell(_agree(row))} | {_cell(dev)} | {_cell(drv)} | {date} |")
    lines += ["", "## What each probe checks and settles", "",
              "| probe | check | documented row | documented expectation | settles |",
              "|---|---|---|---|---|"]
    for row in doc["probes"]:
        settles = ", ".join(row["fields"]) or "—"
        got = row.get("settles") or {}
        if got:
            settles += " → " + ", ".join(f"{k}={v!r}" for k, v in got.items())
        lines.append(f"| {row['name']} | {_cell(cite(row['family'], row.get('check', '')))} | "
                     f"{_cell(cite(row['family'], row['spec']))} "
                     f"| {_cell(row.get('expect', ''))} | {_cell(settles)} |")
    lines += ["", "## Settled profile", ""]
    if doc["settled"]:
        lines += ["Values the real run settled (`kvreg.realhw.report.profile_from_report` "
                  "builds the full profile):", "", "```json",
                  json.dumps(doc["settled"], indent=2, sort_keys=True), "```"]
        lines += [f"- conflict: {c}" for c in doc.get("settled_conflicts", [])]
    else:
        lines.append("Nothing settled: the real column did not run. The fake's [UNC] "
                     "switches keep their documented defaults.")
    lines += ["", "## Documented divergences", "",
              "| name | probe | documented row | reason |", "|---|---|---|---|"]
    for d in doc["divergences"]:
        lines.append(f"| {d['name']} | {d['probe'] or '(no probe)'} | {_cell(d['spec'])} | "
                     f"{_cell(d['reason'])} |")
    lines += ["", *_measurement_md(doc.get("measurement"))]
    lines += ["", *mooncake_markdown(doc.get("mooncake"))]
    return "\n".join(lines).rstrip() + "\n"


def _rate(row: Mapping[str, Any] | None) -> str:
    if not row:
        return "—"
    if row.get("gib_per_s") is None:
        return f"failed (code {row.get('code')})"
    return (f"{row['gib_per_s']:.2f} GiB/s ({row['seconds_per_gib']:.3g} s/GiB, "
            f"{row['calls']} call{'s' if row['calls'] != 1 else ''})")


DOC_PAGES = {"cuda": "docs/cuda-runtime.md", "rdma": "docs/mooncake-verbs.md"}


def cite(family: str, text: str) -> str:
    """A probe's section reference (``§2.2 ...``) as a citation of kvreg's docs page."""
    if text.startswith("§") and family in DOC_PAGES:
        return f"{DOC_PAGES[family]} {text}"
    return text


def _measurement_md(meas: Mapping[str, Any] | None) -> list[str]:
    lines = ["## Registration throughput", ""]
    if not meas:
        return [*lines, "Not measured in this run (no GPU, or not requested). kvreg never "
                "reports the fake's own speed as a throughput figure."]
    lines.append(f"Backend: **{meas['backend']}** — {meas['note']}.")
    if meas["backend"] == "fake":
        lines += ["", "**Not a hardware measurement**: these figures are the speed of kvreg's "
                  "fake runtime (a smoke test of the measurement code); no plot is drawn."]
    if meas.get("skipped"):
        return [*lines, "", f"Skipped: {meas['skipped']}."]
    step = int(meas["unit_bytes"])
    unit = "GiB" if step >= 1 << 30 else "MiB"

    def size(n: int) -> str:
        return f"{n // step} {unit}"

    lines += ["", f"Buffer: {size(meas['total_bytes'])}, prefaulted in "
              f"{meas.get('prefault_seconds', 0):.2f} s. Plot: [{SVG_NAME}]({SVG_NAME}).",
              "", "| what | pinned |", "|---|---|",
              f"| one whole-buffer call | {_rate(meas.get('whole'))} |",
              f"| kvreg reference (chunk limit {size(meas['reference']['chunk_limit'])}) | "
              f"{_rate(meas.get('reference'))} |"]
    ratio = meas.get("reference_vs_whole")
    for c in meas.get("chunks", []):
        lines.append(f"| chunks of {size(c['chunk_bytes'])} | {_rate(c)} |")
    for t in meas.get("threads", []):
        lines.append(f"| {t['threads']} thread(s), chunks of {size(t['chunk_bytes'])} | "
                     f"{_rate(t)} |")
    if ratio is not None:
        lines += ["", f"Reference / whole-buffer throughput: {ratio:.2f} (design target: "
                  "at least 0.90 on real hardware)."]
    return lines


def write_report(doc: Mapping[str, Any], out_dir: str | Path) -> dict[str, Path]:
    """Write fidelity.json, FIDELITY.md and, with a hardware measurement, throughput.svg.

    A measurement of the fake gets no plot: a chart of its speed would read as hardware.
    """
    validate_report(doc)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / JSON_NAME, "markdown": out / MD_NAME}
    paths["json"].write_text(json.dumps(doc, indent=2, default=str) + "\n")
    paths["markdown"].write_text(render_markdown(doc))
    meas = doc.get("measurement")
    if meas and meas.get("backend") != "fake":
        from .measure import render_svg

        paths["svg"] = out / SVG_NAME
        title = f"pinned GiB/s by chunk size — {doc['machine'].get('describe')}"
        paths["svg"].write_text(render_svg(dict(meas), title=title))
    return paths
