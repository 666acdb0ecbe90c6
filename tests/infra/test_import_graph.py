"""The module-import graph of kvreg has no cycles, imports only along the layers' direction,
and no module imports another's private name.

The graph is built from the package's source with ``ast`` (nothing is imported): one node per
module of the folders pyproject maps to ``kvreg.*``, one edge per ``import`` / ``from ...
import`` of another kvreg module, relative imports resolved. Imports inside functions count
too: a lazy import only hides a cycle until the function runs (the cycles this guards
against were all of that kind). Only imports under ``if TYPE_CHECKING:`` are left out, since
they never run. Lazy imports of heavy *third-party* modules (torch, cuda-bindings, pyverbs)
stay allowed; they are not kvreg modules and make no edges here.

The layers (ARCHITECTURE.md#one-scenario-one-way): ``fakes/`` imports nothing of kvreg but
itself (a fake knows no harness); the generic layers of ``harness/`` (``run``, ``scenario``,
``cli``, ``plan``, ``pools``, ``ranks``) import no target's room (``harness/cuda``,
``harness/mooncake``): they reach a target through the registry (``run/targets.py``, by
module name) only, so a new target touches its own room and the registry.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

import pytest

from kvreg.harness.run.targets import TARGETS

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"fakes": "kvreg.fakes", "harness": "kvreg.harness", "realhw": "kvreg.realhw",
            "scenarios": "kvreg.scenarios"}

# Cycles being broken on their own branches; remove an entry when its cycle is gone (the
# test fails while a stale entry stays, so the list only shrinks).
KNOWN_CYCLES_IN_PROGRESS: list[frozenset[str]] = []
# (fakes/mooncake/'s fake <-> session <-> store loop runs only under TYPE_CHECKING, so it
# is no cycle here.)
# (module, imported private name) pairs being removed on their own branches; none today
KNOWN_PRIVATE_IMPORTS_IN_PROGRESS: set[tuple[str, str]] = set()

GENERIC_LAYERS = ("kvreg.harness.run", "kvreg.harness.scenario", "kvreg.harness.cli",
                  "kvreg.harness.plan", "kvreg.harness.pools", "kvreg.harness.ranks")
# every room the registry names (a new target is checked the day its line is added)
TARGET_ROOMS = tuple(sorted({module.rsplit(".", 1)[0] for module in TARGETS.values()}))
# the registry names every target; it imports them by module name (importlib), never by an
# import statement, but it is the one generic module that may
TARGET_REGISTRY = {"kvreg.harness.run.targets"}
# Imports of a target's room from a generic layer being removed on their own branches; none
# today. The list only shrinks: a new entry fails the check, and an entry whose import is
# gone fails until it is removed.
GENERIC_TO_TARGET_ISSUE_26: set[tuple[str, str]] = set()


def modules() -> dict[str, tuple[Path, bool]]:
    """Every kvreg module: name -> (file, is a package's __init__)."""
    found = {}
    for folder, prefix in PACKAGES.items():
        for file in sorted((ROOT / folder).rglob("*.py")):
            parts = list(file.relative_to(ROOT / folder).with_suffix("").parts)
            package = parts[-1] == "__init__"
            if package:
                parts.pop()
            found[".".join([prefix, *parts])] = (file, package)
    return found


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement that can run (not under ``if TYPE_CHECKING:``)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                yield from _imports(ast.Module(body=[child], type_ignores=[]))
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        yield from _imports(node)


def _from_target(name: str, package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return str(node.module)
    base = name.split(".") if package else name.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _known(name: str, mods: dict[str, tuple[Path, bool]]) -> str | None:
    """The kvreg module that an import of ``name`` executes (its nearest known ancestor)."""
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> dict[str, set[str]]:
    mods = modules()
    graph: dict[str, set[str]] = {}
    for name, (file, package) in mods.items():
        edges: set[str] = set()
        for node in _imports(ast.parse(file.read_text(), str(file))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                mod = _from_target(name, package, node)
                subs = [f"{mod}.{a.name}" for a in node.names if f"{mod}.{a.name}" in mods]
                # ``from . import sibling`` inside a package reads only the sibling: the
                # enclosing package is already initialised before any of its modules runs.
                # Any name that is not a submodule is read from the package itself.
                ancestor = name.startswith(f"{mod}.")
                targets = subs if ancestor and len(subs) == len(node.names) else [mod, *subs]
            for target in targets:
                known = _known(target, mods)
                if known and known != name:
                    edges.add(known)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(frozenset(component))
    return found


def a_cycle(graph: dict[str, set[str]], component: frozenset[str]) -> list[str]:
    """One concrete loop inside ``component``, for the failure message."""
    start = min(component)
    path, seen = [start], {start}
    while True:
        nxt = min(m for m in graph[path[-1]] if m in component)
        if nxt in seen:
            return [*path[path.index(nxt):], nxt]
        path.append(nxt)
        seen.add(nxt)


def test_no_import_cycles() -> None:
    graph = import_graph()
    unexpected = [c for c in cycles(graph) if c not in KNOWN_CYCLES_IN_PROGRESS]
    assert not unexpected, "import cycles:\n" + "\n".join(
        " -> ".join(a_cycle(graph, c)) for c in unexpected)


def test_known_cycles_are_still_there() -> None:
    """An allowlisted cycle that is gone must leave the list (it only shrinks)."""
    present = cycles(import_graph())
    stale = [sorted(c) for c in KNOWN_CYCLES_IN_PROGRESS if c not in present]
    assert not stale, f"no longer cycles, remove from KNOWN_CYCLES_IN_PROGRESS: {stale}"


def private_imports() -> set[tuple[str, str]]:
    """(importing module, name) for every ``from kvreg... import _name`` across modules."""
    mods = modules()
    found = set()
    for name, (file, package) in mods.items():
        for node in _imports(ast.parse(file.read_text(), str(file))):
            if not isinstance(node, ast.ImportFrom):
                continue
            mod = _from_target(name, package, node)
            if _known(mod, mods) is None:
                continue
            for alias in node.names:
                private = alias.name.startswith("_") and not alias.name.startswith("__")
                if private and f"{mod}.{alias.name}" not in mods:
                    found.add((name, f"{mod}.{alias.name}"))
    return found


def test_no_private_names_imported_across_modules() -> None:
    found = private_imports()
    assert found <= KNOWN_PRIVATE_IMPORTS_IN_PROGRESS, sorted(
        found - KNOWN_PRIVATE_IMPORTS_IN_PROGRESS)
    stale = KNOWN_PRIVATE_IMPORTS_IN_PROGRESS - found
    assert not stale, f"gone, remove from KNOWN_PRIVATE_IMPORTS_IN_PROGRESS: {sorted(stale)}"


def _in(name: str, roots: tuple[str, ...]) -> bool:
    return any(name == r or name.startswith(f"{r}.") for r in roots)


def layer_violations(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """(importer, imported) for every import against the layers' direction."""
    found = set()
    for name, edges in graph.items():
        for target in edges:
            fake_out = _in(name, ("kvreg.fakes",)) and not _in(target, ("kvreg.fakes",))
            generic_in = (_in(name, GENERIC_LAYERS) and name not in TARGET_REGISTRY
                          and _in(target, TARGET_ROOMS))
            # a room holds its target's knowledge; what two targets share lives in a
            # generic layer, so rooms never import each other
            rooms = {r for r in TARGET_ROOMS if _in(name, (r,)) or _in(target, (r,))}
            cross_room = len(rooms) == 2 and all(_in(m, TARGET_ROOMS) for m in (name, target))
            if fake_out or generic_in or cross_room:
                found.add((name, target))
    return found


def test_imports_follow_the_layers() -> None:
    found = layer_violations(import_graph())
    new = found - GENERIC_TO_TARGET_ISSUE_26
    assert not new, "imports against the layers' direction:\n" + "\n".join(
        f"{a} -> {b}" for a, b in sorted(new))
    stale = GENERIC_TO_TARGET_ISSUE_26 - found
    assert not stale, f"gone, remove from GENERIC_TO_TARGET_ISSUE_26: {sorted(stale)}"


# -- the checker itself, on made-up graphs and sources ---------------------------------------

@pytest.mark.parametrize(("graph", "expected"), [
    ({"a": {"b"}, "b": {"a"}}, [frozenset({"a", "b"})]),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [frozenset({"a", "b", "c"})]),
    ({"a": {"b"}, "b": {"c"}, "c": set()}, []),
    ({"a": {"b", "c"}, "b": {"c"}, "c": set()}, []),
])
def test_cycles_finds_exactly_the_loops(graph: dict[str, set[str]],
                                        expected: list[frozenset[str]]) -> None:
    assert sorted(map(sorted, cycles(graph))) == sorted(map(sorted, expected))
    for component in expected:
        loop = a_cycle(graph, component)
        assert loop[0] == loop[-1]
        assert all(b in graph[a] for a, b in pairwise(loop))


def test_type_checking_and_function_level_imports() -> None:
    src = ("from typing import TYPE_CHECKING\n"
           "if TYPE_CHECKING:\n    import kvreg.a\n"
           "else:\n    import kvreg.b\n"
           "def f():\n    import kvreg.c\n")
    seen = {alias.name for node in _imports(ast.parse(src)) for alias in node.names}
    assert seen == {"TYPE_CHECKING", "kvreg.b", "kvreg.c"}


def test_relative_imports_resolve() -> None:
    node = ast.parse("from ..run import core").body[0]
    assert isinstance(node, ast.ImportFrom)
    assert _from_target("kvreg.harness.cli.main", False, node) == "kvreg.harness.run"
    assert _from_target("kvreg.harness.cli", True, node) == "kvreg.harness.run"


@pytest.mark.parametrize(("edge", "against"), [
    (("kvreg.fakes.cuda.fake_cuda", "kvreg.harness.pools"), True),
    (("kvreg.fakes.faults", "kvreg.realhw.backend"), True),
    (("kvreg.fakes.cuda.fake_cuda", "kvreg.fakes.faults"), False),
    (("kvreg.harness.scenario.format", "kvreg.harness.mooncake.target"), True),
    (("kvreg.harness.pools.registry", "kvreg.harness.cuda"), True),
    (("kvreg.harness.run.targets", "kvreg.harness.cuda.target"), False),
    (("kvreg.harness.cuda.checks", "kvreg.harness.run.endstate"), False),
    (("kvreg.harness.mooncake.world", "kvreg.harness.cuda.buffers"), True),   # room to room
    (("kvreg.harness.mooncake.world", "kvreg.harness.mooncake.checks"), False),
    (("kvreg.harness.runner", "kvreg.harness.cuda"), False),     # not the run/ layer
    (("kvreg.harness.state_machine", "kvreg.harness.mooncake"), False),
    (("kvreg.realhw.backend", "kvreg.fakes.recorder"), False),
])
def test_layer_check_on_made_up_edges(edge: tuple[str, str], against: bool) -> None:
    assert (layer_violations({edge[0]: {edge[1]}}) == {edge}) is against


def test_harness_keeps_few_top_level_modules() -> None:
    """harness/ holds rooms; its top level only the package and the two public modules of
    property tests (real modules, not re-exports)."""
    top = sorted(p.stem for p in (ROOT / "harness").glob("*.py"))
    assert top == ["__init__", "state_machine", "strategies"]
