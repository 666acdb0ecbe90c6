"""The ``mooncake-real`` tier: a real ``mooncake_master`` and real store clients, in a private
network namespace.

Every test module here sets ``pytestmark = pytest.mark.kvreg_mooncake_real``. The real
processes listen on every interface, so the tier runs only inside the network namespace
``bash .ci/mooncake-real PYTHON test`` makes (realhw/mooncake_netns.py): collected anywhere
else (the main suite) the tests skip and name the launcher, and nothing real starts. Without
the Mooncake wheel (or with a library it links missing) they skip and say what to install;
``--kvreg-require-hw`` turns either skip into a failure, as for the GPU and RDMA tiers. A
master that does not start is a failure naming its log. The masters are stopped by pid at
the end of the module (also on a failed test or Ctrl-C: the fixture's ``finally``), and a
failed test gets the master's log in its report.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kvreg.realhw.mooncake_master import MasterProcess
from kvreg.realhw.mooncake_master import missing_reason as _wheel_reason
from kvreg.realhw.mooncake_netns import netns_reason

from ..helpers.mooncake_masters import LONG_LEASE_MS, MASTERS, TEST_MASTERS

MARKER = "kvreg_mooncake_real"


def missing_reason() -> str | None:
    """What is missing to run the real store (the wheel, a library it links, the binary)."""
    reason: str | None = _wheel_reason()
    return reason


def tier_reason() -> str | None:
    """Why the tier does not run here: outside the launcher's namespace nothing real may
    start, whatever is installed; inside it, what is missing."""
    return netns_reason() or missing_reason()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{MARKER}: runs Mooncake's real store and master "
                            "(the PyPI wheel; skipped without it unless --kvreg-require-hw)")


def pytest_runtest_setup(item: pytest.Item) -> None:
    TEST_MASTERS.clear()
    if item.get_closest_marker(MARKER) is None:
        return
    missing = tier_reason()
    if missing:
        if item.config.getoption("--kvreg-require-hw"):
            # as for kvreg_gpu: the kvreg plugin fails it in the call phase (a failed test,
            # not a setup error); the fixtures below hand out None meanwhile
            item.__dict__["_kvreg_missing_hw"] = f"{MARKER}: {missing} (--kvreg-require-hw is set)"
            return
        pytest.skip(f"{MARKER}: {missing}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A failed test's report carries the log of every master started for it."""
    report = yield
    if report.failed:
        for master in [*MASTERS, *TEST_MASTERS]:
            report.sections.append((f"mooncake_master log ({master.log_path})",
                                    master.log_tail(60)))
    return report


@pytest.fixture(scope="module")
def master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MasterProcess | None]:
    """One real master (long leases) for the module, stopped by pid whatever happens
    (None without the wheel or the namespace: the test then fails under --kvreg-require-hw)."""
    if tier_reason():
        yield None
        return
    m = MasterProcess(log_dir=tmp_path_factory.mktemp("mooncake"), lease_ttl_ms=LONG_LEASE_MS)
    MASTERS.append(m)
    try:
        m.start()
        yield m
    finally:
        m.stop()
        MASTERS.remove(m)


@pytest.fixture
def real(master: MasterProcess | None) -> Iterator[Any]:
    """Real stores of the module's master; every one handed out is closed after the test."""
    from kvreg.realhw.mooncake_real import RealMooncake

    if master is None:
        yield None
        return
    with RealMooncake(master) as deployment:
        yield deployment
    master.check_alive()      # a master that died mid-test fails the test with its log


@pytest.fixture(scope="module")
def engine_module() -> Any:
    """The real ``mooncake.engine`` (None outside the tier's namespace or without the wheel:
    the test was then skipped, or fails under --kvreg-require-hw)."""
    if tier_reason():
        return None
    import mooncake.engine

    return mooncake.engine
