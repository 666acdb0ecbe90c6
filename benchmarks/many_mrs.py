"""A Mooncake pool in thousands of MRs against the same pool in a few: what kvreg's own steps cost.

``python many_mrs.py SCENARIO_FILE NAME MR_GIB`` runs one scenario of a Mooncake ``huge*.toml``
file through the runner with kvreg's reference chunking, its MRs capped at ``MR_GIB`` GiB (0:
the limit the scenario gives, the few-MR case; 1 makes a 4 TiB pool about 4 097 MRs, as a
correct implementation registering 1 GiB stride-aligned MRs does). Prints one JSON line: the
verdict, the MRs, the pages moved, seconds per step of the run (register, transfers,
teardown: the implementation's calls and the fake behind them; finish and checks: kvreg's
own), the total and the peak RSS growth over the process after imports (/proc VmHWM).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# imported before the clock: the pool's buffers are tensors over reserved memory, and the
# figures are kvreg's, not torch's import
import torch  # noqa: F401

from kvreg.harness.mooncake import reference
from kvreg.harness.mooncake.world import MooncakeWorld
from kvreg.harness.run.core import run_scenario
from kvreg.harness.run.implementation import Implementation
from kvreg.harness.scenario import load_file

GiB = 1 << 30
STEPS = {"register": "register", "transfer": "transfers", "teardown": "teardown",
         "finish": "finish", "judge": "checks", "warnings": "checks"}


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def capped(mr_gib: int) -> Implementation:
    """kvreg's reference, its MRs at most ``mr_gib`` GiB (0: as large as the limit allows)."""
    def register(store: Any, ptr: int, nbytes: int, *, max_mr_size: int,
                 granularity: int | None) -> list[tuple[int, int]]:
        limit = min(max_mr_size, mr_gib * GiB) if mr_gib else max_mr_size
        done: list[tuple[int, int]] = reference.register(store, ptr, nbytes, max_mr_size=limit,
                                                         granularity=granularity)
        return done

    return Implementation("mooncake", f"reference, MRs <= {mr_gib or 'limit'} GiB", register,
                          reference.teardown)


def timed(seconds: dict[str, float]) -> None:
    """Wrap the world's steps so each adds its wall time to ``seconds``."""
    for method, step in STEPS.items():
        inner: Callable[..., Any] = getattr(MooncakeWorld, method)

        def wrapper(self: Any, *args: Any, _inner: Callable[..., Any] = inner,
                    _step: str = step) -> Any:
            t = time.perf_counter()
            try:
                return _inner(self, *args)
            finally:
                seconds[_step] = seconds.get(_step, 0.0) + time.perf_counter() - t
                if _step == "finish":   # the MRs register made, from the record's trace
                    seconds["mrs"] = sum(1 for e in self.record.trace if e.code == 0
                                         and e.api == "register_buffer"
                                         and e.seq < (self.record.teardown_start or 1 << 62))

        setattr(MooncakeWorld, method, wrapper)


def run(path: Path, name: str, mr_gib: int) -> dict[str, Any]:
    sc = next(s for s in load_file(path, path.parent.parent) if s.name == name)
    seconds: dict[str, float] = {}
    timed(seconds)
    base_rss = _status_kib("VmHWM")
    t0 = time.perf_counter()
    res = run_scenario(sc, capped(mr_gib), keep_trace=False)
    total = time.perf_counter() - t0
    mrs = int(seconds.pop("mrs", 0))
    return {"scenario": sc.id, "mr_gib": mr_gib, "verdict": res.verdict,
            "first": res.first_violation, "mrs": mrs, "calls": res.calls,
            "pages_copied": int(res.copy["pages_copied"]) if res.copy else 0,
            "seconds": seconds, "total_s": total,
            "peak_rss_growth_mb": (_status_kib("VmHWM") - base_rss) / 1024}


if __name__ == "__main__":
    print(json.dumps(run(Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]))))
