"""The rule registry: every rule a check can break, declared once, with what the reports need.

A rule is a :class:`Rule` record: its name, what it asks, where in the code under test its
site is taken (:mod:`.callsite`), the steps whose end it judges, the contract it belongs to
(None: a rule of the real machine, harness/run/contract.py) and, per target, the docs row that
states it. A target's checks declare one function per rule with :func:`rule`, as fakeredis
declares one command per function; :func:`run_rules` runs a target's functions in the order
they were declared and sorts what they found by ``Violation.seq``: a call's seq, or one of the
``ORDER_*`` keys below, which come after every call. Rules both targets judge are declared
here, by name and meaning; a target's own rules are declared whole by its decorator.

``python -m kvreg.harness.run.rules --markdown`` prints the rules table of
scenarios/FORMAT.md; ``--check`` says whether the file holds the current one.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from .result import Violation

__all__ = [
    "CONTRACTS", "EITHER", "ORDER_PENDING", "ORDER_RELEASE", "ORDER_SEAMS", "ORDER_TEARDOWN",
    "ORDER_TRANSFER", "REGISTER", "RULES", "SITES", "SITE_CALL", "SITE_END", "SITE_LAST_CALL",
    "SITE_RAISE", "SITE_RELEASE", "SITE_STEP", "SITE_TEARDOWN", "TEARDOWN", "VIOLATION",
    "WARNING", "Rule", "all_rules", "declare", "get_rule", "markdown", "rule", "rules_for",
    "run_rules", "teardown_rules",
]

# what a rule function finds: violations fail the run, warnings are reported beside it
VIOLATION, WARNING = "violation", "warning"
EITHER = "violation or warning"      # a rule whose severity its case decides (a profile option)

# sort keys of Violation.seq after every call's seq: the end of a run, in the order its parts
# are judged (a call's seq is a trace position, far below these)
ORDER_TRANSFER = 1 << 40             # a transfer over every page failed
ORDER_SEAMS = ORDER_TRANSFER + 1     # a seam a copy crosses, said after the copy that failed
ORDER_RELEASE = 1 << 41              # + the chunk's place among those live at the end
ORDER_TEARDOWN = 1 << 42             # what a teardown raised
ORDER_PENDING = 1 << 43              # an error left pending in a runtime instance

# where a violation's site is taken (callsite.py: CallSites.site_for)
SITE_CALL = "call"            # the call at the violation's seq, else register's definition
SITE_RAISE = "raise"          # where register raised, else register's definition
SITE_TEARDOWN = "teardown"    # where teardown raised, else teardown's definition
SITE_RELEASE = "release"      # the unregister call the message names, else teardown's def
SITE_LAST_CALL = "last-call"  # the last call the code made (a loop)
SITE_STEP = "step"            # teardown's definition when the message is "after teardown"
SITE_END = "end"              # the end state register left: its last registration call
SITES = (SITE_CALL, SITE_RAISE, SITE_TEARDOWN, SITE_RELEASE, SITE_LAST_CALL, SITE_STEP,
         SITE_END)

# the steps whose end a rule judges
REGISTER, TEARDOWN = "register", "teardown"

# the contracts an implementation declares (harness/run/contract.py) that a rule may judge
CONTRACTS = {
    "chunk-limit": "each registration call within the chunk limit register was given",
    "rejection": "a granularity (object stride) above the limit refused before any call",
    "repeatable-teardown": "a later teardown round retries what the first could not release",
}

F = TypeVar("F", bound=Callable[..., list[Violation]])


@dataclass(frozen=True)
class Rule:
    """One rule: what the reports, the call sites and the docs know of it."""

    name: str
    summary: str                       # what it asks, one paragraph (FORMAT.md's table)
    site: str                          # SITE_*: where its violation points in the code
    judges: frozenset[str] = frozenset({REGISTER})     # the steps whose end it judges
    contract: str | None = None        # a key of CONTRACTS; None: the real machine's rule
    docs: tuple[tuple[str, str], ...] = ()      # (target, "docs/<page>.md §N") per target
    emits: frozenset[str] = frozenset()         # VIOLATION / WARNING, from its functions

    @property
    def targets(self) -> tuple[str, ...]:
        return tuple(t for t, _ in self.docs)

    @property
    def severity(self) -> str:
        """Violation, warning or either, from what its functions report."""
        if self.emits == {WARNING}:
            return WARNING
        return EITHER if WARNING in self.emits else VIOLATION


RULES: dict[str, Rule] = {}
# target -> its rule functions in declaration order: (rule names, emits, function)
_CHECKS: dict[str, list[tuple[tuple[str, ...], str, Callable[..., list[Violation]]]]] = {}


def declare(name: str, summary: str, *, site: str, judges: Iterable[str] = (REGISTER,),
            contract: str | None = None) -> Rule:
    """Declare rule ``name`` (ValueError when it already is, or a field is unknown)."""
    if name in RULES:
        raise ValueError(f"rule {name!r} is declared twice")
    if site not in SITES:
        raise ValueError(f"rule {name!r}: unknown site {site!r}; known: {', '.join(SITES)}")
    if contract is not None and contract not in CONTRACTS:
        raise ValueError(f"rule {name!r}: unknown contract {contract!r}")
    steps = frozenset(judges)
    if not steps or not steps <= {REGISTER, TEARDOWN}:
        raise ValueError(f"rule {name!r}: judges the steps register and/or teardown")
    RULES[name] = Rule(name, summary, site, steps, contract)
    return RULES[name]


def rule(name: str, *also: str, target: str, doc: str, emits: str = VIOLATION,
         summary: str | None = None, site: str | None = None,
         judges: Iterable[str] | None = None, contract: str | None = None
         ) -> Callable[[F], F]:
    """Register the decorated function as ``target``'s check of rule ``name`` (and of the
    rules ``also`` when one step's single finding names one of several, as a transfer's
    does). ``doc`` is the target's docs row for it. A rule not declared yet is declared by
    ``summary`` and ``site`` (and ``judges``, ``contract``); a declared one takes none."""
    if emits not in (VIOLATION, WARNING):
        raise ValueError(f"rule {name!r}: emits {VIOLATION} or {WARNING}, not {emits!r}")
    given = summary is not None or site is not None or judges is not None \
        or contract is not None
    if name in RULES and given and not _same_declaration(RULES[name], summary, site, judges,
                                                         contract):
        raise ValueError(f"rule {name!r} is declared already: give only target and doc")
    if name not in RULES:
        if summary is None or site is None:
            raise ValueError(f"rule {name!r} is not declared: give its summary and site")
        declare(name, summary, site=site, judges=judges or (REGISTER,), contract=contract)
    names = (name, *also)
    for n in names:
        if n not in RULES:
            raise ValueError(f"rule {n!r} is not declared")
        r = RULES[n]
        docs = r.docs if any(t == target for t, _ in r.docs) else (*r.docs, (target, doc))
        RULES[n] = replace(r, docs=docs, emits=r.emits | {emits})

    def register(fn: F) -> F:
        # a module executed again (pytester's in-process runs drop the modules they imported
        # from sys.modules) replaces its own function instead of adding a second that would
        # report every finding twice
        checks = _CHECKS.setdefault(target, [])
        key = (fn.__module__, fn.__qualname__)
        same = [i for i, c in enumerate(checks) if (c[2].__module__, c[2].__qualname__) == key]
        if same:
            checks[same[0]] = (names, emits, fn)      # in its place: the order stays
        else:
            checks.append((names, emits, fn))
        return fn
    return register


def _same_declaration(r: Rule, summary: str | None, site: str | None,
                      judges: Iterable[str] | None, contract: str | None) -> bool:
    """Whether a declaring module executed again declares ``r`` as it did the first time."""
    return (summary, site, frozenset(judges or (REGISTER,)), contract) == \
        (r.summary, r.site, r.judges, r.contract)


def run_rules(target: str, emits: str, context: Any) -> list[Violation]:
    """What ``target``'s rule functions that report ``emits`` find in ``context``, first
    one first (a stable sort: findings of one seq keep the functions' order)."""
    out: list[Violation] = []
    for _names, kind, fn in _CHECKS.get(target, ()):
        if kind == emits:
            out += fn(context)
    out.sort(key=lambda v: v.seq)
    return out


def rules_for(target: str) -> list[Rule]:
    """The rules ``target``'s checks judge, in their order (its checks must be imported)."""
    seen: dict[str, Rule] = {}
    for names, _, _ in _CHECKS.get(target, ()):
        for n in names:
            seen.setdefault(n, RULES[n])
    return list(seen.values())


def get_rule(name: str) -> Rule | None:
    return RULES.get(name)


def all_rules() -> list[Rule]:
    """Every rule, with every target's checks loaded (through the target registry)."""
    from .targets import TARGETS, get_target
    for name in TARGETS:
        get_target(name)
    return sorted(RULES.values(), key=lambda r: r.name)


def teardown_rules() -> frozenset[str]:
    """The rules that judge what a teardown did (a check of the teardown step reports only
    these): those whose ``judges`` has the teardown step."""
    return frozenset(r.name for r in RULES.values() if TEARDOWN in r.judges)


# -- the rules both targets judge --------------------------------------------------------

declare("call-budget", "the implementation made more calls than the scenario's "
        "`call_budget`: it loops or never finishes", site=SITE_LAST_CALL)
declare("register-size-zero", "no registration call of size 0 (the runtime and the store "
        "reject it)", site=SITE_CALL)
declare("range-outside-buffer", "each registered range lies inside one pool buffer",
        site=SITE_CALL)
declare("error-swallowed", "register returned normally after a failed call and the pool is "
        "not fully registered; it names the failure register ended on (as `error-reported` "
        "finds it)", site=SITE_CALL)
declare("unexpected-error", "register raised in a scenario that expects success (or whose "
        "fault never fired); the message names the failed call it rests on", site=SITE_RAISE)
declare("not-rejected", "with `expect = \"rejected\"`, register accepted a granularity "
        "(object stride) above the limit; it must raise ValueError before any call",
        site=SITE_END, contract="rejection")
declare("rejected-too-late", "register rejected a granularity above the limit only after "
        "making registration calls", site=SITE_CALL, contract="rejection")
declare("rejected-wrong-error", "register rejected a granularity above the limit with "
        "another exception than ValueError", site=SITE_RAISE, contract="rejection")
declare("registered", "after every register returned normally, each byte of each buffer the "
        "pool pins is covered by live registrations (MRs) exactly once: no gap, no overlap. "
        "A do-nothing register, or one that pins only its first chunk, fails here although "
        "every pageable copy succeeds. With `pinning = \"optional\"` nothing at all also "
        "passes", site=SITE_END)
declare("seams-aligned", "every seam between two registrations of one buffer lies on a "
        "multiple of the copy unit the reference uses (the object stride on the Mooncake "
        "target), judged from the registrations whether or not the transfers step runs. On "
        "the CUDA target a misaligned seam fails only where a copy would cross it "
        "(docs/pools.md §5.4): inside a page extent the batch copy sends (the same page "
        "`transfer-failed` names when transfers run) or between two pages of a layer slab "
        "that the direct layer_first path copies as one run (named in the message); seams in "
        "rows no transfer addresses (the DSA indexer's spare rows, docs/pools.md §2.5) cut "
        "nothing. Both rest on the [UNC] `copy_across_registrations` (docs/cuda-runtime.md "
        "§5.4): under `\"allow\"` the rule warns instead. Not judged on Mooncake profiles "
        "that split slices at MR seams (`head`)", site=SITE_END)
declare("error-reported", "when register raises after a failed registration call, the "
        "exception (or its `__cause__` / `__context__`) carries the code, name or error "
        "string of the failure register ended on (or of an earlier try of that same call); a "
        "`TypeError` from `cudaGetErrorString(int(rc))` is quoted with the line that raised "
        "it. The failure register ended on is the first failed call no later call tried "
        "again: after the whole buffer was refused and chunks began, the chunk that failed, "
        "not the refused whole call", site=SITE_RAISE)
declare("error-pending", "after register and after teardown, each runtime instance's last "
        "error (`cudaPeekAtLastError`, docs/cuda-runtime.md §6): torch's, cuda-bindings' and "
        "libcudart loaded through ctypes (the `ctypes` style, or a `driver`-style fallback to "
        "the runtime); kvreg drains what its own copies leave. A warning where nothing could "
        "drain it (below)", site=SITE_STEP, judges=(REGISTER, TEARDOWN))
declare("recovered", "a failed call the implementation retried past, ending fully "
        "registered on aligned seams without raising", site=SITE_CALL)
declare("transfer-failed", "every page copies (stores and reads back) through the "
        "registrations", site=SITE_END)
declare("unregister-not-a-live-base", "each unregister names the base of a live "
        "registration (MR): not a pointer inside one, not one already released",
        site=SITE_CALL, judges=(REGISTER, TEARDOWN))
declare("not-rolled-back", "says `no rollback` (none of the earlier chunks was released) or "
        "`partial rollback` (released k of n) and lists what is left", site=SITE_RAISE,
        judges=(TEARDOWN,))
declare("leak", "nothing the implementation registered is still registered after teardown "
        "(a chunk a failed rollback pinned for good counts where register returned "
        "normally)", site=SITE_RELEASE, judges=(TEARDOWN,))
declare("teardown-raised", "teardown raises only to report an injected unregister failure, "
        "never a programming error (TypeError and its kin)", site=SITE_TEARDOWN,
        judges=(TEARDOWN,))
declare("unregister-not-retried", "for an implementation that declares no repeatable "
        "teardown (one teardown round), a chunk whose unregister failed there with a failure "
        "that leaves it pinned: only a later round could release it, so it stays pinned "
        "until the process exits and is not a `leak`", site=SITE_END, judges=(TEARDOWN,),
        contract="repeatable-teardown")


# -- the rules table of scenarios/FORMAT.md ------------------------------------------------

_BEGIN = "<!-- rules: generated by `python -m kvreg.harness.run.rules --markdown` -->"
_END = "<!-- end of rules -->"
FORMAT_MD = Path(__file__).resolve().parents[2] / "scenarios" / "FORMAT.md"


def markdown(rules: Sequence[Rule] | None = None) -> str:
    """The rules table, between the markers FORMAT.md keeps it in."""
    rows = [_BEGIN, "", "| rule | reports | targets | contract | docs | what it asks |",
            "|---|---|---|---|---|---|"]
    for r in rules if rules is not None else all_rules():
        docs = "; ".join(sorted({d for _, d in r.docs}))
        rows.append(f"| `{r.name}` | {r.severity} | {', '.join(sorted(r.targets))} | "
                    f"{r.contract or ''} | {docs} | {r.summary} |")
    return "\n".join([*rows, "", _END])


def current_table(text: str) -> str | None:
    """The table between the markers of ``text`` (None when they are missing)."""
    start, end = text.find(_BEGIN), text.find(_END)
    if start < 0 or end < start:
        return None
    return text[start:end + len(_END)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kvreg.harness.run.rules",
                                     description="The rules table of scenarios/FORMAT.md.")
    parser.add_argument("--markdown", action="store_true", help="print the table")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 unless FORMAT.md holds the current table")
    parser.add_argument("--write", action="store_true",
                        help="replace the table in FORMAT.md with the current one")
    args = parser.parse_args(argv)
    table = markdown()
    if args.check or args.write:
        text = FORMAT_MD.read_text()
        old = current_table(text)
        if old is None:
            print(f"{FORMAT_MD}: no rules table markers", file=sys.stderr)
            return 2
        if args.write:
            FORMAT_MD.write_text(text.replace(old, table))
        elif old != table:
            print("scenarios/FORMAT.md's rules table is stale: run "
                  "`python -m kvreg.harness.run.rules --write`", file=sys.stderr)
            return 1
        return 0
    print(table)
    return 0


if __name__ == "__main__":
    # the registry the targets fill is the imported module's, not this __main__ copy's
    from kvreg.harness.run.rules import main as _main
    sys.exit(_main())
