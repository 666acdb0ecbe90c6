"""Baselines: the scenario failures a project already knows about, committed next to its code.

A team adopting kvreg on code with known failures records them once (``kvreg run
--write-baseline FILE``), commits the file, and from then on ``kvreg run --baseline FILE``
(or the plugin's ``kvreg_baseline`` ini option) fails only on failures the file does not
record, and reports recorded failures that went away so the file can shrink.

The file is plain text meant for review: ``#`` comments, then one line per known failure,
``<scenario id> <rule>`` (a scenario that breaks two rules has two lines), sorted, so a
diff shows exactly which failure appeared or went away. A scenario that errors (the run
itself broke) is recorded with the rule ``error``.

Ids are the same wherever kvreg runs (:mod:`kvreg.harness.scenario.ids`); a file written
now says so in its header (``IDS_LINE``). A file without that line was written when a
scenario's id was its path from the folder given to kvreg (``our_pool/oom`` for what is now
``kv_scenarios/our_pool/oom``): its lines still match, by the tail of today's id, so such a
file keeps its meaning until ``--write-baseline`` rewrites it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

__all__ = ["ERROR_RULE", "IDS_LINE", "Baseline", "BaselineError", "BaselineOutcome", "compare",
           "failure_rules", "load_baseline", "parse_baseline", "renamed_note", "render_baseline",
           "write_baseline"]

ERROR_RULE = "error"
HEADER = (
    "# kvreg baseline: known scenario failures, one '<scenario id> <rule>' per line.\n"
    "# `kvreg run --baseline FILE` fails only on failures not listed here and reports the\n"
    "# listed ones that no longer fail. Regenerate with `kvreg run --write-baseline FILE`;\n"
    "# review changes to this file like code.\n"
    "# kvreg ids: rootdir (the same wherever kvreg runs; kvreg's scenarios/FORMAT.md)\n"
)
IDS_LINE = "# kvreg ids: rootdir"


class BaselineError(ValueError):
    """A baseline file that cannot be read; the message names the file and the line."""


class _Violation(Protocol):
    @property
    def rule(self) -> str: ...


class _Result(Protocol):
    @property
    def id(self) -> str: ...

    @property
    def verdict(self) -> str: ...

    @property
    def violations(self) -> Sequence[_Violation]: ...


def failure_rules(result: _Result) -> tuple[str, ...]:
    """The rules a result breaks, in first-seen order (``error`` for a run that broke)."""
    if result.verdict == "error":
        return (ERROR_RULE,)
    if result.verdict != "fail":
        return ()
    seen: dict[str, None] = {}
    for v in result.violations:
        seen.setdefault(v.rule, None)
    return tuple(seen) or (ERROR_RULE,)


@dataclass(frozen=True)
class Baseline:
    """Known failures: scenario id -> the rules it is known to break."""

    entries: Mapping[str, frozenset[str]]
    source: str = ""
    old_ids: bool = False   # written before ids were rootdir-relative (no IDS_LINE)

    def key(self, scenario_id: str) -> str | None:
        """The id this file records the scenario under: its id, or in a file of old ids
        the longest tail of it (two parts at least: file and name) that the file holds."""
        if scenario_id in self.entries:
            return scenario_id
        if self.old_ids:
            parts = scenario_id.split("/")
            for i in range(1, len(parts) - 1):
                tail = "/".join(parts[i:])
                if tail in self.entries:
                    return tail
        return None

    def rules(self, scenario_id: str) -> frozenset[str]:
        key = self.key(scenario_id)
        return self.entries[key] if key is not None else frozenset()

    def knows(self, scenario_id: str, rules: Iterable[str]) -> bool:
        """Whether every rule this scenario breaks is recorded (and it breaks at least one)."""
        wanted = set(rules)
        return bool(wanted) and wanted <= self.rules(scenario_id)

    def __len__(self) -> int:
        return sum(len(r) for r in self.entries.values())


def parse_baseline(text: str, source: str) -> Baseline:
    entries: dict[str, set[str]] = {}
    old_ids = True
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if line.startswith(IDS_LINE):
            old_ids = False
        if not line or line.startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 2:
            raise BaselineError(f"{source}:{n}: expected '<scenario id> <rule>', got {raw!r}")
        entries.setdefault(parts[0], set()).add(parts[1])
    return Baseline({k: frozenset(v) for k, v in entries.items()}, source, old_ids)


def load_baseline(path: str | Path) -> Baseline:
    """Read a baseline file; BaselineError names the file (and line) when it cannot."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except IsADirectoryError:
        raise BaselineError(f"{p}: is a folder, not a baseline file") from None
    except FileNotFoundError:
        raise BaselineError(f"{p}: no such baseline file (create it with "
                            "--write-baseline)") from None
    except UnicodeDecodeError:
        raise BaselineError(f"{p}: not UTF-8 text, so not a baseline file") from None
    except OSError as exc:
        raise BaselineError(f"{p}: cannot read: {exc.strerror}") from None
    return parse_baseline(text, str(p))


def render_baseline(results: Iterable[_Result]) -> str:
    """The baseline text for these results: header, then sorted '<id> <rule>' lines."""
    lines = sorted({f"{r.id} {rule}" for r in results for rule in failure_rules(r)})
    return HEADER + "".join(line + "\n" for line in lines)


def write_baseline(path: str | Path, results: Iterable[_Result]) -> int:
    """Write the baseline of ``results``; returns how many lines it records."""
    text = render_baseline(results)
    Path(path).write_text(text, encoding="utf-8")
    return sum(1 for line in text.splitlines() if line and not line.startswith("#"))


@dataclass
class BaselineOutcome:
    """How a run compares with a baseline."""

    new: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    known: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    fixed: list[tuple[str, str]] = field(default_factory=list)
    renamed: list[tuple[str, str]] = field(default_factory=list)   # (old id in the file, id)

    @property
    def ok(self) -> bool:
        """No failure outside the baseline."""
        return not self.new

    def lines(self) -> list[str]:
        """What to tell the user, one line per fact."""
        out = [f"known failure (baseline): {sid} [{', '.join(rules)}]"
               for sid, rules in self.known]
        out += [f"no longer fails, remove from the baseline: {sid} {rule}"
                for sid, rule in self.fixed]
        out += [f"NEW failure (not in the baseline): {sid} [{', '.join(rules)}]"
                for sid, rules in self.new]
        if self.renamed:
            out.append(renamed_note(self.renamed))
        return out


def renamed_note(renamed: Sequence[tuple[str, str]]) -> str:
    """The line that tells a user their baseline still names scenarios by old ids."""
    old, now = renamed[0]
    return (f"{len(renamed)} scenario(s) matched by the id they had before ids were made the "
            f"same wherever kvreg runs (e.g. {old} is now {now}); `kvreg run "
            "--write-baseline FILE` writes today's ids")


def compare(results: Iterable[_Result], baseline: Baseline) -> BaselineOutcome:
    """Split failures into new and known; list recorded (id, rule) pairs that went away.

    Only scenarios that ran are judged, so ``-k`` and ``--shard`` runs never report the
    rest of the baseline as fixed.
    """
    out = BaselineOutcome()
    for r in results:
        rules = failure_rules(r)
        key = baseline.key(r.id)
        if key is not None and key != r.id:
            out.renamed.append((key, r.id))
        if rules:
            (out.known if baseline.knows(r.id, rules) else out.new).append((r.id, rules))
        if r.verdict in ("pass", "fail", "error"):
            # named as the file has it, so the line to remove is found
            out.fixed += [(key or r.id, rule)
                          for rule in sorted(baseline.rules(r.id) - set(rules))]
    return out
