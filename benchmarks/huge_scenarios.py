"""Every scenario of the bundled ``huge*.toml`` files (pools up to 4 TiB), in one process.

``python huge_scenarios.py [REPEAT]`` runs each scenario (REPEAT times, default once)
through the runner with kvreg's reference (it serves both targets) and prints one JSON line:
the scenarios, the verdicts, the seconds (imports, then the scenarios), the peak RSS of the
whole process and its growth over the process after imports (/proc VmHWM), and the buffers
still mapped at the end. Run as a script so that its peak RSS is its own.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def main(repeat: int = 1) -> dict[str, Any]:
    t0 = time.perf_counter()
    import torch  # noqa: F401  # the runner's styles import it; count it with the imports

    from kvreg.harness.run.core import run_scenario
    from kvreg.harness.run.implementation import make_implementation
    from kvreg.harness.scenario import load_file

    t1 = time.perf_counter()
    base = _status_kib("VmHWM")
    verdicts: Counter[str] = Counter()
    slowest = (0.0, "")
    impl = make_implementation()        # kvreg's reference: it serves both targets
    files = sorted(SCENARIOS.glob("*/huge*.toml"))
    catalog = [sc for path in files for sc in load_file(path, SCENARIOS)]
    for sc in catalog * repeat:
        s0 = time.perf_counter()
        verdicts[run_scenario(sc, impl).verdict] += 1
        slowest = max(slowest, (time.perf_counter() - s0, sc.id))
    t2 = time.perf_counter()
    try:
        from kvreg.fakes import reserved
        mapped = len(reserved.live())
    except ImportError:
        mapped = 0
    return {"scenarios": sum(verdicts.values()), "verdicts": dict(verdicts),
            "import_s": t1 - t0, "scenarios_s": t2 - t1, "slowest": slowest,
            "peak_rss_mb": _status_kib("VmHWM") / 1024,
            "peak_rss_growth_mb": (_status_kib("VmHWM") - base) / 1024,
            "buffers_still_mapped": mapped}


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else 1)))
