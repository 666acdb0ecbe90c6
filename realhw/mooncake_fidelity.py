"""The fidelity report's Mooncake section: the fake store against the real one, on this machine.

``kvreg fidelity --family mooncake`` (and ``python -m kvreg.realhw.run_all``, which includes
it) starts a real ``mooncake_master``, runs the differential suite's seeded call
sequences (:mod:`.mooncake_diff`) on a real store over tcp and on the fake's
``v0.3.13`` profile, and reports the counts: calls compared, agreeing, named divergences,
unexplained ones. No GPU or RDMA device is needed; without the wheel the section says what
is missing, and outside the tier's network namespace (run it as ``python -m
kvreg.realhw.mooncake_netns -- kvreg fidelity --family mooncake``) it says that instead
(:func:`.mooncake_master.missing_reason`). The master is stopped by its pid whatever happens.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

__all__ = ["SEEDS", "mooncake_markdown", "run_mooncake_fidelity"]

SEEDS = 16          # the CI tier runs 48; the report runs a third of them (about 30 s)
LENGTH = 40
LEASE_MS = 600_000  # no lease taken in a sequence expires inside it (as in the CI tier)


def run_mooncake_fidelity(seeds: int = SEEDS, length: int = LENGTH) -> dict[str, Any]:
    """``{"ran": bool, "reason"?, "version"?, "calls", "agreeing", "named", "unexplained"}``."""
    from .mooncake_master import MasterProcess, missing_reason, package_version

    missing = missing_reason()
    if missing is not None:
        return {"ran": False, "reason": missing}
    from kvreg.fakes.mooncake import get_store_profile

    from .mooncake_diff import Differential
    from .mooncake_real import RealMooncake

    profile = get_store_profile("v0.3.13").replace(default_kv_lease_ttl_ms=LEASE_MS)
    with tempfile.TemporaryDirectory(prefix="kvreg-mooncake-") as tmp, \
            MasterProcess(log_dir=Path(tmp), lease_ttl_ms=LEASE_MS) as master, \
            RealMooncake(master) as real:
        diff = Differential(real, profile)
        try:
            for seed in range(seeds):
                diff.run(seed, length, lifecycle=seed % 4 == 3)
        finally:
            diff.close()
        result = diff.result
    return {"ran": True, "version": package_version(), "profile": "v0.3.13",
            "seeds": seeds, "length": length, "calls": result.calls,
            "agreeing": result.agreeing, "named": dict(sorted(result.named.items())),
            "unexplained": [u.splitlines()[0] for u in result.unexplained]}


def mooncake_markdown(entry: dict[str, Any] | None) -> list[str]:
    """FIDELITY.md's Mooncake section (empty when the run did not ask for it)."""
    if entry is None:
        return []
    lines = ["## Mooncake Store against the real store", ""]
    if not entry["ran"]:
        return [*lines, f"Not run: {entry['reason']}."]
    named = ", ".join(f"{k} {v}" for k, v in entry["named"].items()) or "none"
    lines += [f"`mooncake-transfer-engine-non-cuda` {entry['version']} over tcp in a private "
              f"network namespace, against the fake's `{entry['profile']}` profile: "
              f"{entry['seeds']} seeded sequences of {entry['length']} calls "
              "(docs/mooncake-verbs.md §7).", "",
              f"**{entry['calls']} calls compared: {entry['agreeing']} agree; named "
              f"divergences: {named}; {len(entry['unexplained'])} unexplained.**"]
    lines += [f"- unexplained: {u}" for u in entry["unexplained"]]
    return lines
