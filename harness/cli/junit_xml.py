"""``kvreg run --junit-xml FILE``: the verdicts as a JUnit XML report CI systems display.

One ``<testcase>`` per scenario (classname = its file's id, name = the scenario name), a
``<failure>`` carrying every violation, an ``<error>`` for a run that broke, ``<skipped>``
for skipped scenarios and for failures the baseline already records (the way pytest reports
an xfail), so GitHub and GitLab test views agree with kvreg's exit code. Each violation line
names where in the code under test it happened; the suite's ``<properties>`` list the root
causes (``kvreg.cause``, most frequent first) as the table's causes block does.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Container, Sequence
from pathlib import Path
from typing import Any, Protocol

__all__ = ["render_junit", "write_junit"]


class _Violation(Protocol):
    @property
    def rule(self) -> str: ...

    @property
    def message(self) -> str: ...


class _Result(Protocol):
    @property
    def id(self) -> str: ...

    @property
    def verdict(self) -> str: ...

    @property
    def violations(self) -> Sequence[_Violation]: ...

    @property
    def reason(self) -> str: ...

    @property
    def guards(self) -> str: ...

    @property
    def seconds(self) -> float: ...


def _clean(text: str) -> str:
    """Drop characters XML 1.0 cannot hold (an implementation's message may carry any)."""
    return "".join(c for c in text if c in "\t\n\r" or ord(c) >= 0x20)


def _line(v: _Violation) -> str:
    where = getattr(v, "where", "")
    code = getattr(v, "code", "")
    count = getattr(v, "count", 1)
    return (f"[{v.rule}] {v.message}" + (f" (x{count})" if count > 1 else "")
            + (f"\n    at {where}" + (f": {code}" if code else "") if where else ""))


def render_junit(results: Sequence[_Result], *, known: Container[str] = (),
                 suite: str = "kvreg", causes: Sequence[Any] = ()) -> str:
    """The XML text; ``known`` holds the ids whose failure the baseline records, ``causes``
    the run's root causes (:class:`kvreg.harness.run.causes.Cause`)."""
    counts = {"tests": len(results), "failures": 0, "errors": 0, "skipped": 0}
    root = ET.Element("testsuites")
    ts = ET.SubElement(root, "testsuite", name=suite)
    if causes:
        props = ET.SubElement(ts, "properties")
        for c in causes:
            where = f"{c.where}: {c.code}" if c.where else "(no line of the code under test)"
            ET.SubElement(props, "property", name="kvreg.cause", value=_clean(
                f"{c.scenarios} scenario(s) [{c.rule}] {where} (e.g. {c.example})"))
    total = 0.0
    for r in results:
        classname, _, name = r.id.rpartition("/")
        case = ET.SubElement(ts, "testcase", classname=classname or suite, name=name or r.id,
                             time=f"{r.seconds:.3f}")
        total += r.seconds
        first = r.violations[0].message if r.violations else r.reason
        detail = "\n".join(_line(v) for v in r.violations) or r.reason
        if r.verdict in ("fail", "error") and r.id in known:
            counts["skipped"] += 1
            ET.SubElement(case, "skipped", type="kvreg.baseline",
                          message=_clean(f"known failure (baseline): {first}"))
        elif r.verdict == "fail":
            counts["failures"] += 1
            el = ET.SubElement(case, "failure", type=r.violations[0].rule if r.violations
                               else "fail", message=_clean(first))
            el.text = _clean(f"{detail}\nguards against: {r.guards}")
        elif r.verdict == "error":
            counts["errors"] += 1
            el = ET.SubElement(case, "error", type="kvreg.error", message=_clean(first))
            el.text = _clean(detail)
        elif r.verdict == "internal-error":   # kvreg's own bug, with its traceback
            counts["errors"] += 1
            el = ET.SubElement(case, "error", type="kvreg.internal-error",
                               message=_clean(first))
            el.text = _clean(f"{detail}\n{getattr(r, 'tb', '')}".rstrip())
        elif r.verdict == "skip":
            counts["skipped"] += 1
            ET.SubElement(case, "skipped", message=_clean(r.reason))
    for el in (root, ts):
        for key, value in counts.items():
            el.set(key, str(value))
        el.set("time", f"{total:.3f}")
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") \
        + "\n"


def write_junit(path: str | Path, results: Sequence[_Result], *,
                known: Container[str] = (), causes: Sequence[Any] = ()) -> None:
    Path(path).write_text(render_junit(results, known=known, causes=causes), encoding="utf-8")
