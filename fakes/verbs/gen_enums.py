"""Generate the fake's ibverbs enum table from rdma-core's ``libibverbs/verbs.h``.

    python -m kvreg.fakes.verbs.gen_enums /usr/include/infiniband/verbs.h \
        /usr/include/infiniband/tm_types.h \
        [--supplement fakes/verbs/data/verbs_enums_supplement.json] \
        [-o fakes/verbs/data/verbs_enums.json]

Every ``enum NAME { ... }`` of the header becomes a table of members in header order
(implicit values counted as C counts them, ``= expr`` evaluated with the members and the
integer ``#define``s seen so far); the members of anonymous ``enum { ... }`` blocks become
plain constants, as pyverbs exposes them. The supplement adds members of newer rdma-core
releases than the header given, and the few names pyverbs takes from headers that are not
installed (each with its source); a supplement entry that the header already defines must
agree with it, or generation fails. ``--check`` compares instead of
writing, for CI (exit status 1 on a difference).
"""

from __future__ import annotations

import argparse
import ast
import json
import operator
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_OUTPUT", "DEFAULT_SUPPLEMENT", "evaluate", "generate", "main",
           "parse_header"]

DATA = Path(__file__).with_name("data")
DEFAULT_OUTPUT = DATA / "verbs_enums.json"
DEFAULT_SUPPLEMENT = DATA / "verbs_enums_supplement.json"

_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_ENUM = re.compile(r"\benum\s+(\w+)?\s*\{([^}]*)\}", re.S)
_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)[ \t]+([^\n]+)$", re.M)
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]+[<"]infiniband/([\w.]+)[>"]', re.M)
_SUFFIX = re.compile(r"\b(0[xX][0-9a-fA-F]+|\d+)(?:[uU][lL]{0,2}|[lL]{1,2}[uU]?)\b")

_BINOPS: dict[type, Callable[[int, int], int]] = {
    ast.LShift: operator.lshift, ast.RShift: operator.rshift, ast.BitOr: operator.or_,
    ast.BitAnd: operator.and_, ast.BitXor: operator.xor, ast.Add: operator.add,
    ast.Sub: operator.sub, ast.Mult: operator.mul,
}
_UNOPS: dict[type, Callable[[int], int]] = {
    ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert,
}


def evaluate(expr: str, names: Mapping[str, int]) -> int:
    """The value of a C integer constant expression (literals, known names, + - * << >> | &
    ^ ~); ValueError for anything else (casts, calls, unknown names)."""
    text = _SUFFIX.sub(r"\1", " ".join(expr.split()))

    def ev(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return int(node.value)
        if isinstance(node, ast.Name):
            if node.id in names:
                return int(names[node.id])
            raise ValueError(f"unknown name {node.id!r} in {expr!r}")
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return _BINOPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNOPS:
            return _UNOPS[type(node.op)](ev(node.operand))
        raise ValueError(f"not an integer constant expression: {expr!r}")

    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise ValueError(f"not an integer constant expression: {expr!r}") from None
    return ev(tree)


def _included(text: str, include_dir: Path | None, seen: set[str]) -> dict[str, int]:
    """Names defined by the ``<infiniband/...>`` headers ``text`` includes (recursively)."""
    known: dict[str, int] = {}
    if include_dir is None:
        return known
    for m in _INCLUDE.finditer(text):
        name = m.group(1)
        path = include_dir / name
        if name in seen or not path.is_file():
            continue
        seen.add(name)
        sub = path.read_text(encoding="utf-8", errors="replace")
        known.update(_included(sub, include_dir, seen))
        enums, constants = parse_header(sub, None, known)
        known.update(constants)
        for members in enums.values():
            known.update(members)
    return known


def parse_header(text: str, include_dir: Path | None = None,
                 preload: Mapping[str, int] | None = None,
                 ) -> tuple[dict[str, list[tuple[str, int]]], dict[str, int]]:
    """(named enums in header order, the members of anonymous enums).

    ``include_dir``: where ``#include <infiniband/...>`` files are found, so values the
    header takes from them (``IBV_ACCESS_OPTIONAL_FIRST``) resolve.
    """
    known: dict[str, int] = dict(preload or {})
    known.update(_included(text, include_dir, set()))
    text = _COMMENT.sub(" ", text)
    defines: dict[str, tuple[int, str]] = {}
    for m in _DEFINE.finditer(text):
        defines[m.group(1)] = (m.start(), m.group(2).strip())
    enums: dict[str, list[tuple[str, int]]] = {}
    constants: dict[str, int] = {}

    def define_values(upto: int) -> None:
        for name, (pos, expr) in defines.items():
            if pos < upto and name not in known:
                try:
                    known[name] = evaluate(expr, known)
                except ValueError:
                    continue

    for m in _ENUM.finditer(text):
        define_values(m.start())
        members: list[tuple[str, int]] = []
        nxt = 0
        for item in m.group(2).split(","):
            item = item.strip()
            if not item:
                continue
            name, _, expr = item.partition("=")
            name = name.strip()
            try:
                value = evaluate(expr, known) if expr.strip() else nxt
            except ValueError:
                if include_dir is None and preload is not None:
                    break        # an included header's enum we cannot use: skip the rest
                raise
            known[name] = value
            members.append((name, value))
            nxt = value + 1
        if m.group(1):
            enums[m.group(1)] = members
        else:
            constants.update(members)
    define_values(len(text))
    if preload is not None:
        constants.update({k: v for k, v in known.items() if k not in constants})
    return enums, constants


def _supplement(enums: dict[str, list[tuple[str, int]]], constants: dict[str, int],
                entries: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    added: list[dict[str, Any]] = []
    for e in entries:
        name, value = str(e["name"]), int(e["value"])
        if e.get("enum") is None:         # a constant pyverbs exposes from elsewhere
            if constants.get(name, value) != value:
                raise ValueError(f"supplement {name}={value} disagrees with the header "
                                 f"({constants[name]})")
            if name not in constants:
                constants[name] = value
                added.append({"enum": None, "name": name, "value": value,
                              "source": str(e["source"])})
            continue
        enum_name = str(e["enum"])
        if e.get("new_enum") and enum_name not in enums:
            enums[enum_name] = []
        table = dict(enums.get(enum_name, []))
        if name in table:
            if table[name] != value:
                raise ValueError(f"supplement {name}={value} disagrees with the header "
                                 f"({table[name]})")
            continue
        if enum_name not in enums:
            raise ValueError(f"supplement names enum {enum_name!r}, not in the header")
        enums[enum_name].append((name, value))
        added.append({"enum": enum_name, "name": name, "value": value,
                      "source": str(e["source"])})
    return added


def generate(header: str, supplement: Sequence[Mapping[str, Any]] = (),
             source: str = "libibverbs/verbs.h",
             include_dir: Path | None = None) -> dict[str, Any]:
    """The table as written to the data file."""
    enums, constants = parse_header(header, include_dir)
    added = _supplement(enums, constants, supplement)
    return {
        "source": source,
        "enums": {k: [[n, v] for n, v in members] for k, members in enums.items()},
        "constants": constants,
        "supplement": added,
    }


def _dump(table: Mapping[str, Any]) -> str:
    return json.dumps(table, indent=1) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kvreg.fakes.verbs.gen_enums",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("header", nargs="+",
                    help="rdma-core's verbs.h, then any other header whose enums pyverbs "
                         "exposes (tm_types.h)")
    ap.add_argument("--supplement", default=str(DEFAULT_SUPPLEMENT),
                    help="JSON list of members newer than the header ('' for none)")
    ap.add_argument("-o", "--output", default=str(DEFAULT_OUTPUT))
    ap.add_argument("--source", default="",
                    help="provenance written into the table (default: the header path)")
    ap.add_argument("--check", action="store_true",
                    help="compare with the output file instead of writing it")
    args = ap.parse_args(argv)
    header = "\n".join(Path(h).read_text(encoding="utf-8") for h in args.header)
    extra = json.loads(Path(args.supplement).read_text()) if args.supplement else []
    table = generate(header, extra, args.source or " ".join(args.header),
                     Path(args.header[0]).parent)
    out = Path(args.output)
    if args.check:
        old = json.loads(out.read_text())
        same = {k: v for k, v in old.items() if k != "source"} == \
            {k: v for k, v in json.loads(_dump(table)).items() if k != "source"}
        print("up to date" if same else f"{out} differs from {' '.join(args.header)}")
        return 0 if same else 1
    out.write_text(_dump(table), encoding="utf-8")
    print(f"wrote {out}: {len(table['enums'])} enums, {len(table['constants'])} constants")
    return 0


if __name__ == "__main__":
    sys.exit(main())
