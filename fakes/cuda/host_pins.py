"""The fake CUDA process on a fake host: cudaHostRegister pins the host's pages.

With a rank's :class:`~kvreg.fakes.host.fake_host.RankMemory` attached, every successful
registration at driver level (so through every face: torch, cuda-python, ctypes, the driver
API) also pins its pages on the host, which may refuse: then the registration is undone and
the call returns the host's code (docs/host.md §5): ``pin_exhausted_code`` past the host's
pinnable memory, 1 for a /dev/shm page that cannot be allocated or pins of the same shared
pages that ran concurrently (an injected failure). Each registration also costs device memory
for the driver's page tables, 8 bytes per 4 KiB page (96 MiB for a 48 GiB region, vLLM
#51762 [OBS-ext]), so ``cudaMemGetInfo`` falls by it and gets it back at unregister; a
registration whose page tables do not fit fails with 2. Without a host attached nothing
changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import errors as E
from .cuda_driver import FakeDriver

if TYPE_CHECKING:
    from ..host.fake_host import RankMemory

__all__ = ["PAGE_TABLE_BYTES_PER_PAGE", "HostPins", "attach_host"]

# docs/host.md §5: 96 MiB of GPU memory per 48 GiB region = 8 bytes per 4 KiB page [OBS-ext]
PAGE_TABLE_BYTES_PER_PAGE = 8
_PAGE = 4096


@dataclass
class HostPins:
    """The link between one fake CUDA process's driver and its rank's memory on a host."""

    fake: Any            # the FakeCuda
    driver: FakeDriver
    memory: RankMemory
    page_table_bytes_per_page: int = PAGE_TABLE_BYTES_PER_PAGE
    _register: Any = None
    _unregister: Any = None
    _tables: dict[int, int] = field(default_factory=dict)   # base -> page-table allocation

    def page_table_cost(self, ptr: int, size: int) -> int:
        pages = -(-(ptr + size) // _PAGE) - ptr // _PAGE
        return pages * self.page_table_bytes_per_page

    def host_register(self, ptr: int, size: int, flags: int) -> int:
        code: int = self._register(ptr, size, flags)
        if code:
            return code        # the driver refused it before pinning anything
        cost = self.page_table_cost(ptr, size)
        total = self.driver.profile.total_memory
        used = sum(a.size for a in self.driver.device_ranges())
        if cost > total - used:
            self._unregister(ptr)
            return E.MEMORY_ALLOCATION   # the page tables do not fit (docs/host.md §5) [INF]
        code = self.memory.pin(ptr, size)
        if code:
            self._unregister(ptr)
            return code
        if cost:
            self._tables[ptr] = self.driver.device_alloc(
                cost, self.driver.current_device()).base
        return 0

    def host_unregister(self, ptr: int) -> int:
        code: int = self._unregister(ptr)
        if code == 0:
            if ptr in self.memory.live_pins():
                self.memory.unpin(ptr)
            table = self._tables.pop(ptr, None)
            if table is not None:
                self.driver.device_free(table)
        return code

    def detach(self) -> None:
        """Back to the driver alone (the host keeps what is pinned until unregistered)."""
        del self.driver.host_register, self.driver.host_unregister


def attach_host(fake: Any, memory: RankMemory, *,
                page_table_bytes_per_page: int = PAGE_TABLE_BYTES_PER_PAGE) -> HostPins:
    """Attach rank ``memory`` to ``fake`` (a ``FakeCuda``); returns the link."""
    driver: FakeDriver = fake.driver
    if "host_register" in vars(driver):
        raise ValueError("this fake CUDA process already has a host attached")
    pins = HostPins(fake, driver, memory, page_table_bytes_per_page,
                    driver.host_register, driver.host_unregister)
    # the runtime instances and the driver face call these by attribute on the driver
    driver.host_register = pins.host_register       # type: ignore[method-assign]
    driver.host_unregister = pins.host_unregister   # type: ignore[method-assign]
    return pins
