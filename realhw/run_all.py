"""The one script to run on a GPU (or RDMA) machine: ``python -m kvreg.realhw.run_all --out DIR``.

It detects the machine, runs every fidelity probe on the fake and on the hardware, measures
registration throughput on prefaulted memory (1 to 64 GiB, bounded by free memory), and
writes ``fidelity.json``, ``FIDELITY.md`` and ``throughput.svg`` into DIR, plus
``capabilities.json``; its Mooncake section holds the fake store against a real one
(:mod:`.mooncake_fidelity`, no hardware needed). It takes a few minutes on a machine with
128 GiB of RAM (the measurement pins up to 64 GiB about fifteen times); ``--max-gib``
shortens it.

Same options as ``kvreg fidelity``; exit codes as there.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from .cli import build_parser, execute

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    args = build_parser("python -m kvreg.realhw.run_all").parse_args(argv)
    if args.family is None:   # the whole tier: the probes and the real Mooncake store
        args.family = ["cuda", "rdma", "mooncake"]
    if args.list:
        return execute(args)
    from .capabilities import detect

    start = time.monotonic()
    caps = detect()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "capabilities.json").write_text(json.dumps(caps.to_dict(), indent=2) + "\n")
    print(f"machine: {caps.describe()}")
    for kind in ("gpu", "rdma"):
        missing = caps.missing_reason("gpu" if kind == "gpu" else "rdma")
        print(f"  {kind}: {'ready' if missing is None else missing}")
    code = execute(args)
    print(f"done in {time.monotonic() - start:.0f} s (exit {code})")
    return code


if __name__ == "__main__":
    sys.exit(main())
