"""The ``kvreg`` command line."""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kvreg",
        description="Test the memory registration of LLM KV-cache pools on a fake CUDA runtime.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("demo", help="replay SGLang PR #36798: byte-offset chunk seams break "
                                "page copies, page-aligned ones do not")
    from .plan import add_parser as add_plan
    from .run import add_parsers as add_run

    add_run(sub)
    add_plan(sub)
    from kvreg.realhw.cli import add_parser as add_fidelity

    add_fidelity(sub)
    cov = sub.add_parser("coverage", help="write COVERAGE.md: which CUDA APIs the fake models")
    cov.add_argument("--output", default="COVERAGE.md")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "demo":
        from .demo import main as demo_main

        return int(demo_main())
    if args.command in ("run", "list"):
        from .run import run_list, run_run

        return int(run_run(args) if args.command == "run" else run_list(args))
    if args.command == "plan":
        from .plan import run as plan_run

        return int(plan_run(args))
    if args.command == "fidelity":
        from kvreg.realhw.cli import run as fidelity_run

        return int(fidelity_run(args))
    if args.command == "coverage":
        from kvreg.fakes.coverage import main as cov_main

        return int(cov_main(["--output", args.output]))
    return 2


if __name__ == "__main__":
    sys.exit(main())
