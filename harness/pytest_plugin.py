"""The pytest plugin's entry point (``kvreg``; also ``-p kvreg.harness.pytest_plugin``).

The plugin lives in :mod:`kvreg.harness.pytest.plugin`; this module re-exports its hooks and
fixtures so the entry point and ``-p`` users keep their module path.
"""

from __future__ import annotations

from kvreg.harness.pytest.plugin import (
    MARKERS,
    PoolFactory,
    PoolHandle,
    fake_cudart,
    fake_mooncake,
    fake_verbs,
    kvreg_faults,
    kvreg_mooncake_store,
    kvreg_pool,
    pytest_addoption,
    pytest_configure,
    pytest_report_header,
    pytest_runtest_call,
    pytest_runtest_setup,
)
from kvreg.harness.pytest.real_pools import kvreg_host_memory, kvreg_pool_check

__all__ = ["MARKERS", "PoolFactory", "PoolHandle", "fake_cudart", "fake_mooncake", "fake_verbs",
           "kvreg_faults", "kvreg_host_memory", "kvreg_mooncake_store", "kvreg_pool",
           "kvreg_pool_check", "pytest_addoption",
           "pytest_configure",
           "pytest_report_header", "pytest_runtest_call", "pytest_runtest_setup"]
