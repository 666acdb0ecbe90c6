"""The ``nixl-real`` tier: the fake NIXL agent held against nixl-cu12 1.5.1's real agent
(UCX over DRAM), which always runs in a child process (realhw/nixl_real.py: the wheel's
process dies with SIGSEGV at exit).

Every test module here sets ``pytestmark = pytest.mark.kvreg_nixl_real``. UCX listens on
every interface address, so the tier runs only inside the network namespace ``bash
.ci/nixl-real PYTHON test`` makes (realhw/mooncake_netns.py): collected anywhere else (the
main suite) the tests skip and name the launcher, and no real agent starts. Without the
wheel they skip and say what to install; ``--kvreg-require-hw`` turns either skip into a
failure, as for the other real tiers.
"""

from __future__ import annotations

from typing import Any

import pytest

from kvreg.realhw.nixl_diff import SECTIONS_SEED
from kvreg.realhw.nixl_real import run_real, tier_reason

from ..helpers.nixl_pair import LENGTH, SEEDS

MARKER = "kvreg_nixl_real"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{MARKER}: runs NIXL's real agent (nixl-cu12 1.5.1, "
                            "UCX over DRAM, in a child process; skipped without it unless "
                            "--kvreg-require-hw)")


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker(MARKER) is None:
        return
    missing = tier_reason()
    if missing:
        if item.config.getoption("--kvreg-require-hw"):
            item.__dict__["_kvreg_missing_hw"] = f"{MARKER}: {missing} (--kvreg-require-hw is set)"
            return
        pytest.skip(f"{MARKER}: {missing}")


@pytest.fixture(scope="session")
def real_run() -> dict[str, Any] | None:
    """The real agents' results for every seed (the differential's and the fixed sequence
    of refused lists) and the child's sockets (one child for the session; None where the
    tier does not run: the test then fails under --kvreg-require-hw)."""
    if tier_reason():
        return None
    return run_real([*SEEDS, SECTIONS_SEED], LENGTH)
