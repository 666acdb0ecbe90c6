"""The ``kvreg`` command line."""

from __future__ import annotations

import argparse
import sys
from importlib import metadata

from .arguments import OneLineParser, UsageError, check_output_path, fail
from .pipes import stdout_gone


def _version() -> str:
    try:
        return metadata.version("kvreg")
    except metadata.PackageNotFoundError:   # a source tree that was never installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="kvreg",
        description="Test the memory registration of LLM KV-cache pools on a fake CUDA runtime.")
    parser.add_argument("--version", action="version", version=f"kvreg {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("demo", help="replay SGLang PR #36798: byte-offset chunk seams break "
                                "page copies, page-aligned ones do not")
    from .plan import add_parser as add_plan
    from .run import EXIT_CODES
    from .run import add_parsers as add_run

    add_run(sub)
    parser.epilog = f"kvreg run's {EXIT_CODES}"
    add_plan(sub)
    from kvreg.realhw.cli import add_parser as add_fidelity

    add_fidelity(sub)
    cov = sub.add_parser("coverage", help="print COVERAGE.md (which CUDA APIs the fake models), "
                                          "or write it with --out")
    cov.add_argument("--out", "--output", dest="out", metavar="FILE",
                     help="write the table to FILE (default: standard output)")
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        code = _dispatch(args)
        sys.stdout.flush()
    except SystemExit:             # --help, --version: printed, then exit; flush here
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            stdout_gone()
        raise
    except BrokenPipeError:
        # stdout's reader left (``kvreg list | head -1``): what was wanted was read. ``run``
        # and ``plan`` keep their own status (their reports survive a closed stdout, see
        # pipes.py); a command that got here had only output left to give.
        stdout_gone()
        return 0
    return code


def _dispatch(args: argparse.Namespace) -> int:
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
        from kvreg.fakes.cuda.coverage import render

        try:
            check_output_path(args.out, "--out", stdout_ok=True)
        except UsageError as exc:
            return fail("kvreg coverage", str(exc))
        if args.out in (None, "-"):
            sys.stdout.write(render())
        else:
            with open(args.out, "w", encoding="utf-8") as f:
                f.write(render())
            print(f"kvreg coverage: wrote {args.out}")
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
