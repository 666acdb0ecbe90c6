"""Fixtures for testing a real pool class: its host memory from kvreg, its registrations judged.

``kvreg_host_memory`` routes the pool's large CPU allocations to no-RAM tensors for the test
(:mod:`kvreg.harness.pool_class.host_memory`); ``kvreg_pool_check`` judges what the pool
registered with kvreg's rules (:mod:`kvreg.harness.pool_class.assertions`). Both reach this
test's ``fake_cudart``.
Imports nothing heavy at load, like the rest of the plugin (:mod:`kvreg.harness.plugin`,
which serves these fixtures).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from kvreg.fakes.cuda.fake_cuda import FakeCuda
    from kvreg.harness.pool_class.assertions import PoolCheck
    from kvreg.harness.pool_class.host_memory import HostMemory

__all__ = ["MARKERS", "kvreg_host_memory", "kvreg_pool_check"]

MARKERS = {
    "kvreg_host_memory": "kvreg_host_memory(threshold=, names=, allocators=): options of the "
                         "kvreg_host_memory fixture (bytes from which torch.empty/zeros are "
                         "served without RAM; buffer names in allocation order; (owner, "
                         "'allocate') methods to replace)",
}


@pytest.fixture
def kvreg_host_memory(fake_cudart: FakeCuda, request: pytest.FixtureRequest
                      ) -> Iterator[HostMemory]:
    """For the test, CPU ``torch.empty`` / ``torch.zeros`` of 64 MiB or more (and the
    allocator methods named) return real tensors over ``MAP_NORESERVE`` memory: a TiB pool
    costs no RAM. Each allocation is tracked in ``fake_cudart`` by name and listed in
    ``kvreg_host_memory.allocations``; ``kvreg_host_memory.allocate(dims, dtype, device)`` is an
    allocator a pool can take. Options: ``@pytest.mark.kvreg_host_memory(threshold=1 << 20,
    names=["kv_buffer"], allocators=[(HostTensorAllocator, "allocate")])``.
    """
    from kvreg.harness.pool_class.host_memory import kvreg_host_memory as host_memory

    marker = request.node.get_closest_marker("kvreg_host_memory")
    options = dict(marker.kwargs) if marker else {}
    with host_memory(fake_cudart, **options) as memory:
        yield memory


@pytest.fixture
def kvreg_pool_check(fake_cudart: FakeCuda) -> Callable[..., PoolCheck]:
    """``check = kvreg_pool_check(buffers, geometry)`` (or ``granularity=``) judges what a pool
    registered in ``fake_cudart`` with ``kvreg run``'s rules: ``check.assert_registered()``
    after the constructor, ``check.assert_released()`` after ``destroy()``; ``registered()``
    and ``released()`` return the violations instead of raising.
    """
    from kvreg.harness.pool_class.assertions import PoolCheck

    def make(buffers: Any, geometry: Any = None, **options: Any) -> PoolCheck:
        return PoolCheck(fake_cudart, buffers, geometry, **options)

    return make
