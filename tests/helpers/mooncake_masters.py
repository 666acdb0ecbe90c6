"""Real ``mooncake_master`` processes for the mooncake-real tier, remembered so a failed test's
report carries their logs (tests/mooncake_real/conftest.py reads ``MASTERS`` and
``TEST_MASTERS`` in its report hook and clears ``TEST_MASTERS`` before each test)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvreg.realhw.mooncake_master import MasterProcess

__all__ = ["LONG_LEASE_MS", "MASTERS", "TEST_MASTERS", "start_master"]

# the master's --default_kv_lease_ttl for the differential suite: long enough that no lease
# taken in a sequence expires inside it; the lease test starts its own short-lease master
LONG_LEASE_MS = 600_000
MASTERS: list[MasterProcess] = []        # the module fixtures' masters
TEST_MASTERS: list[MasterProcess] = []   # masters a test started itself


def start_master(tmp: Path, **kwargs: Any) -> MasterProcess:
    """A started master whose log goes to failing reports; stop it in a ``finally``."""
    master = MasterProcess(log_dir=tmp, **kwargs)
    TEST_MASTERS.append(master)
    master.start()
    return master
