"""COVERAGE of the fake pyverbs: what each module models, and what exists but refuses.

    python -m kvreg.fakes.verbs.coverage

prints one table per ``pyverbs`` module: the names the fake implements, and the real
names (rdma-core v44) it only stands in for, which raise ``NotModelledError`` naming this
table when used. Methods of modelled classes that are placeholders are listed too.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from .device import CONTEXT_NOT_MODELLED
from .fabric import Fabric
from .modules import NOT_MODELLED
from .qp_ex import QPEX_NOT_MODELLED

__all__ = ["coverage_markdown", "main"]

_METHODS = {"pyverbs.device": ("Context", CONTEXT_NOT_MODELLED),
            "pyverbs.qp": ("QPEx", QPEX_NOT_MODELLED)}


def coverage_markdown() -> str:
    """The coverage tables as markdown."""
    mods = Fabric(devices={"mlx5_0": "mlx5"}).node().modules
    lines = ["# Coverage of the fake pyverbs", "",
             "A name in the right column exists (as on the real module) but raises "
             "`NotModelledError` when used.", ""]
    for name in sorted(mods):
        if name == "pyverbs":
            continue
        missing = set(NOT_MODELLED.get(name, ()))
        have = sorted(n for n in vars(mods[name]) if not n.startswith("_") and n not in missing)
        if name in ("pyverbs.enums", "pyverbs.libibverbs_enums"):
            have = [f"{len(have)} enum classes, members and constants (generated from verbs.h)"]
        lines += [f"## `{name}`", "", "| modelled | not modelled |", "|---|---|",
                  f"| {', '.join(have)} | {', '.join(sorted(missing)) or '-'} |"]
        if name in _METHODS:
            cls, methods = _METHODS[name]
            lines.append(f"| | `{cls}` methods: {', '.join(sorted(methods))} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    sys.stdout.write(coverage_markdown() + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
