"""Every citation of kvreg's behaviour reference resolves: an existing docs page and section.

Scenario ``guards``, docstrings, comments, the realhw README and the fidelity report cite
``docs/<page>.md §N.M``; a user who doubts a verdict must find that section in the repository.
Citations of documents a kvreg user does not have (a bare ``pools.md``, ``spec/...``,
``spec §N``, ``design.md``) are reported too. The code's design notes cite
``ARCHITECTURE.md#<anchor>``, and every anchor must name one of its headings.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
# where citations live: the packages, the catalog, the real-hardware tier, the guides
SCOPES = ("fakes", "harness", "realhw", "scenarios", "examples", "README.md")
SUFFIXES = {".py", ".toml", ".md", ".ini", ".tsv", ".txt"}
PAGE_NAMES = "pools|cuda-runtime|mooncake-verbs|anchors"

CITATION = re.compile(r"docs/([\w-]+\.md)((?:\s*(?:,|;|/|-|and|or)?\s*§\s*\d+(?:\.\d+)*)*)")
SECTION = re.compile(r"§\s*(\d+(?:\.\d+)*)")
HEADING = re.compile(r"^#{1,6}\s+(\d+(?:\.\d+)*)\.?\s", re.MULTILINE)
OUTSIDE = re.compile(rf"spec/[\w-]+\.md|(?<![/\w-])(?:{PAGE_NAMES}|design)\.md|\bspec §")
ANCHOR = re.compile(r"ARCHITECTURE\.md#([\w-]+)")
# where the design notes are cited besides the packages: tests, benchmarks, tools
NOTE_SCOPES = ("tests", "benchmarks", "tools")
# a docstring still citing design.md, rewritten with the rest of its module's changes for
# issue 26 §1; the entry must leave once the citation is gone (checked below)
DESIGN_MD_PENDING_ISSUE_26 = {"harness/run/core.py"}


@cache
def sections(page: str) -> frozenset[str]:
    path = DOCS / page
    return frozenset(HEADING.findall(path.read_text())) if path.is_file() else frozenset()


def problems_in(text: str, where: str) -> list[str]:
    """Unresolvable docs citations and citations of outside documents in ``text``."""
    out = []
    for m in CITATION.finditer(text):
        page = m.group(1)
        line = text.count("\n", 0, m.start()) + 1
        if not (DOCS / page).is_file():
            out.append(f"{where}:{line}: cites docs/{page}, which does not exist")
            continue
        for sec in SECTION.findall(m.group(2)):
            if sec not in sections(page):
                out.append(f"{where}:{line}: cites docs/{page} §{sec}, which has no such "
                           "section heading")
    for m in OUTSIDE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        out.append(f"{where}:{line}: cites {m.group(0)!r}, a document outside kvreg; cite "
                   "docs/<page>.md §N (or ARCHITECTURE.md#<heading>) instead")
    return out


def _files(scopes: tuple[str, ...] = SCOPES) -> list[Path]:
    found: list[Path] = []
    for scope in scopes:
        p = ROOT / scope
        found += [p] if p.is_file() else sorted(f for f in p.rglob("*")
                                                 if f.suffix in SUFFIXES and f.is_file())
    return found


def test_the_docs_pages_exist_with_numbered_sections() -> None:
    for page in ("README.md", "cuda-runtime.md", "pools.md", "mooncake-verbs.md"):
        assert (DOCS / page).is_file(), page
    assert {"2.2", "5.4", "11.3", "12.9", "12.10"} <= sections("cuda-runtime.md")
    assert {"0", "1.1", "2.10", "4", "5.2"} <= sections("pools.md")
    assert {"1.6", "1.7", "2.3", "5.2", "6.1"} <= sections("mooncake-verbs.md")


def test_every_citation_resolves() -> None:
    problems = [p for f in _files() for p in problems_in(f.read_text(errors="replace"),
                                                         str(f.relative_to(ROOT)))
                if str(f.relative_to(ROOT)) not in DESIGN_MD_PENDING_ISSUE_26
                or "design.md" not in p]
    assert not problems, "\n".join(problems)
    stale = {f for f in DESIGN_MD_PENDING_ISSUE_26
             if "design.md" not in (ROOT / f).read_text()}
    assert not stale, f"no longer cite design.md, remove from the pending list: {stale}"


def slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lower case, punctuation dropped, spaces to -."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def architecture_anchors() -> set[str]:
    text = (ROOT / "ARCHITECTURE.md").read_text()
    return {slug(h) for h in re.findall(r"^#{1,6}\s+(.+)$", text, re.MULTILINE)}


def test_every_architecture_anchor_resolves() -> None:
    anchors = architecture_anchors()
    this = Path(__file__).resolve()
    problems = []
    for f in _files((*SCOPES, *NOTE_SCOPES)):
        if f.resolve() == this:
            continue
        text = f.read_text(errors="replace")
        for m in ANCHOR.finditer(text):
            if m.group(1) not in anchors:
                line = text.count("\n", 0, m.start()) + 1
                problems.append(f"{f.relative_to(ROOT)}:{line}: ARCHITECTURE.md has no "
                                f"heading #{m.group(1)}")
        if f.suffix == ".py" and f.relative_to(ROOT).parts[0] in NOTE_SCOPES:
            problems += [p for p in problems_in(text, str(f.relative_to(ROOT)))
                         if "design.md" in p]
    assert not problems, "\n".join(problems)


def test_anchors_are_githubs() -> None:
    assert slug("The fake's rules") == "the-fakes-rules"
    assert slug("The rooms of `harness/`") == "the-rooms-of-harness"
    assert slug("One scenario, one way") == "one-scenario-one-way"
    assert {"public-contract", "performance-targets", "fault-plans"} <= architecture_anchors()


def test_the_checker_catches_what_it_must() -> None:
    assert problems_in("see docs/pools.md §1.1 and §2.4", "x") == []
    assert problems_in("docs/pools.md §1.1-§2.3", "x") == []
    assert problems_in("docs/pools.md §9.9", "x") == [
        "x:1: cites docs/pools.md §9.9, which has no such section heading"]
    assert problems_in("docs/nope.md §1", "x") == ["x:1: cites docs/nope.md, which does not exist"]
    assert len(problems_in("(spec/pools.md §1.1)", "x")) == 1
    assert len(problems_in("guards = 'x (pools.md §2.4)'", "x")) == 1
    assert len(problems_in("# spec §2.2: the ceiling", "x")) == 1
    assert len(problems_in('"""The flow (design.md "One scenario")"""', "x")) == 1
    assert problems_in("(ARCHITECTURE.md#fault-plans)", "x") == []


def test_every_scenario_guard_is_checked_too() -> None:
    from kvreg.harness.scenario import load_paths

    problems = [p for sc in load_paths() for p in problems_in(sc.guards, sc.id)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("family", ["cuda", "rdma"])
def test_the_fidelity_report_cites_the_docs(tmp_path: Path, family: str) -> None:
    from kvreg.realhw.fidelity import run_fidelity
    from kvreg.realhw.report import render_markdown

    doc = run_fidelity(real_cuda=None, real_verbs=None, families=[family])
    md = render_markdown(doc)
    assert f"docs/{'cuda-runtime' if family == 'cuda' else 'mooncake-verbs'}.md §" in md
    assert problems_in(md, "FIDELITY.md") == []
