"""A user's real pool class under test: its host memory from kvreg (``host_memory``) and its
registrations judged by kvreg's rules (``assertions``). See examples/README.md §10."""

from __future__ import annotations

from .assertions import (
    PoolCheck,
    PoolRegistrationError,
    assert_pool_registered,
    assert_pool_released,
)
from .host_memory import DEFAULT_THRESHOLD, HostAllocation, HostMemory, kvreg_host_memory

__all__ = ["DEFAULT_THRESHOLD", "HostAllocation", "HostMemory", "PoolCheck",
           "PoolRegistrationError", "assert_pool_registered", "assert_pool_released",
           "kvreg_host_memory"]
