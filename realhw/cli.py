"""``kvreg fidelity``: run the fidelity probes (and the throughput measurement), write the report.

Without hardware it still runs every probe on the fake, marks the real column
"not run: <what is missing>" and writes both files, so the report format is exercised on
every CPU-only machine; it measures no throughput then (the fake's own speed, thousands of
GiB/s, is not a hardware figure and is never plotted), unless ``--measure-fake`` asks for
a labelled smoke run of the measurement code. Exit codes: 0 when no
disagreement is left unexplained and no probe errored, 1 otherwise, 2 for usage errors
(and, with ``--require-hw``, 3 when the hardware is missing).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["add_parser", "build_parser", "execute", "run"]

GiB, MiB = 1 << 30, 1 << 20


def _options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default="fidelity-report", metavar="DIR",
                   help="directory for fidelity.json, FIDELITY.md and throughput.svg "
                        "(default: %(default)s)")
    p.add_argument("--fake-only", action="store_true",
                   help="do not touch real hardware even where it exists")
    p.add_argument("--probe", action="append", default=None, metavar="NAME",
                   help="run only this probe (repeatable); see --list")
    p.add_argument("--family", choices=["cuda", "rdma", "mooncake"], action="append",
                   default=None,
                   help="run only this family of probes (repeatable; default cuda and rdma; "
                        "mooncake: the fake store against a real one started on loopback)")
    p.add_argument("--list", action="store_true", help="list the probes and exit")
    p.add_argument("--no-measure", action="store_true",
                   help="skip the registration-throughput measurement")
    p.add_argument("--measure-fake", action="store_true",
                   help="without a GPU, still run the measurement code on the fake (a smoke "
                        "test: reported as the fake's speed, never plotted)")
    p.add_argument("--max-gib", type=int, default=64,
                   help="largest buffer the measurement pins, in GiB (default: %(default)s; "
                        "bounded by available memory)")
    p.add_argument("--repeat", type=int, default=1,
                   help="best of N runs per throughput figure (default: %(default)s)")
    p.add_argument("--require-hw", action="store_true",
                   help="exit 3 instead of writing a fake-only report when no GPU is usable")


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Add ``fidelity`` to the ``kvreg`` subcommands."""
    p: argparse.ArgumentParser = sub.add_parser(
        "fidelity", help="compare the fake with this machine's CUDA/RDMA hardware and write "
                         "fidelity.json and FIDELITY.md")
    _options(p)
    return p


def build_parser(prog: str = "kvreg fidelity") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    _options(p)
    return p


def _list() -> int:
    from .probes import all_probes

    for probe in all_probes():
        fields = f" -> {', '.join(probe.fields)}" if probe.fields else ""
        print(f"{probe.name:<38} {probe.family:<5} {probe.check:<10} {probe.question}{fields}")
    return 0


def execute(args: argparse.Namespace) -> int:
    """Run what ``args`` asks for; print a summary; return the exit code."""
    if args.list:
        return _list()
    from kvreg.fakes.cuda.fake_cuda import FakeCuda

    from .capabilities import detect
    from .fidelity import AUTO, run_fidelity
    from .measure import measure
    from .report import write_report

    families = args.family or ["cuda", "rdma"]
    probe_families = [f for f in families if f != "mooncake"]
    caps = detect(rdma="rdma" in families)
    gpu_missing = caps.missing_reason("gpu")
    if args.require_hw and gpu_missing and not args.fake_only:
        print(f"kvreg fidelity: {gpu_missing} (--require-hw is set)", file=sys.stderr)
        return 3
    real: Any = None if args.fake_only else AUTO
    try:
        doc = run_fidelity(real_cuda=real, real_verbs=real, names=args.probe,
                           families=probe_families, capabilities=caps)
    except ValueError as exc:
        print(f"kvreg fidelity: error: {exc}", file=sys.stderr)
        return 2
    if not args.no_measure and "cuda" in families:
        if doc["real"]["cuda"]["ran"]:
            from .backend import RealCuda

            doc["measurement"] = measure(RealCuda(), unit=GiB, max_units=args.max_gib,
                                         repeat=args.repeat)
        elif args.measure_fake:
            doc["measurement"] = measure(FakeCuda(), unit=MiB, max_units=64,
                                         repeat=args.repeat)
    if "mooncake" in families and not args.fake_only:
        from .mooncake_fidelity import run_mooncake_fidelity

        doc["mooncake"] = run_mooncake_fidelity()
    paths = write_report(doc, args.out)
    s = doc["summary"]
    print(f"kvreg fidelity: {s['total']} probes: {s['agree']} agree, {s['disagree']} disagree "
          f"({s['unexplained']} unexplained), {s['skipped']} skipped, {s['error']} errors")
    for family in ("cuda", "rdma"):
        entry = doc["real"][family]
        if not entry["ran"]:
            print(f"  real {family}: not run: {entry['reason']}")
    mc = doc.get("mooncake")
    if mc is not None:
        print(f"  real mooncake: {mc['calls']} calls compared, {mc['agreeing']} agree, "
              f"{len(mc['unexplained'])} unexplained" if mc["ran"]
              else f"  real mooncake: not run: {mc['reason']}")
    if not doc["real"]["cuda"]["ran"] and "cuda" in families and not args.no_measure:
        print("  throughput: not measured: no GPU in this run"
              + (" (ran on the fake as a smoke test only; not a hardware figure)"
                 if doc.get("measurement") else ""))
    for path in paths.values():
        print(f"  wrote {path}")
    return 1 if s["unexplained"] or s["error"] else 0


def run(args: argparse.Namespace) -> int:
    """The ``kvreg fidelity`` entry point (wired in ``kvreg.harness.cli``)."""
    return execute(args)
