"""Device memory as registration code asks about it (docs/cuda-runtime.md §14).

One question per function, over a :class:`~kvreg.fakes.cuda.cuda_driver.FakeDriver`: which
allocation holds a device pointer (a ``cudaMalloc`` block or a VMM mapping), what
``cuMemGetAddressRange`` and ``cuPointerGetAttribute`` answer for it, the dma-buf fd
``cuMemGetHandleForAddressRange`` exports, and the BAR1 space GPUDirect RDMA takes, through
nvidia-peermem or a dma-buf an RDMA device maps. The RDMA fake reaches device memory only
through :class:`GpuMemory`, so a NIC of a node with a GPU attached sees the same allocations
the code under test made.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .. import dmabuf
from . import errors as E

if TYPE_CHECKING:
    from .cuda_driver import FakeDriver

__all__ = ["DMA_BUF_FD", "GPU_PAGE", "MAPPING_TYPE_PCIE", "DeviceRange", "GpuMemory",
           "device_range", "export_dmabuf"]

DMA_BUF_FD = 1            # CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD (cuda.h) [DOC]
MAPPING_TYPE_PCIE = 1     # CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE (cuda.h) [DOC]
GPU_PAGE = 64 << 10       # GPUDirect RDMA pins in 64 KiB GPU pages [DOC: GPUDirect RDMA guide]


@dataclass(frozen=True)
class DeviceRange:
    """The allocation a device pointer is in.

    ``base``/``size``: what cuMemGetAddressRange returns (a cudaMalloc block, or the one VMM
    mapping: not the reservation) [DOC]; ``range_base``/``range_size``: what
    CU_POINTER_ATTRIBUTE_RANGE_START_ADDR / _RANGE_SIZE return (the block, or the whole
    cuMemAddressReserve range) [DOC].
    """

    base: int
    size: int
    range_base: int
    range_size: int
    device: int
    kind: str            # "malloc" | "vmm"
    buffer_id: int
    rdma_capable: bool   # CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE

    @property
    def end(self) -> int:
        return self.base + self.size


def device_range(driver: FakeDriver, ptr: int) -> DeviceRange | None:
    """The allocation holding ``ptr``, or None (unknown, or a reservation's unmapped part)."""
    block = driver.device_owner(ptr)
    if block is not None:
        return DeviceRange(block.base, block.size, block.base, block.size, block.device,
                           "malloc", block.buffer_id, True)
    mapping = driver.vmm.mapping_of(ptr)
    if mapping is None:
        return None
    res = mapping.reservation
    return DeviceRange(mapping.base, mapping.size, res.base, res.size, mapping.phys.device,
                       "vmm", mapping.phys.buffer_id, mapping.phys.rdma_capable)


def export_dmabuf(driver: FakeDriver, ptr: int, size: int, handle_type: int,
                  flags: int) -> tuple[int, int | None]:
    """cuMemGetHandleForAddressRange (docs/cuda-runtime.md §14.3): (code, fd).

    DMA_BUF_FD only, and only where the device supports dma-buf; ``ptr`` and ``size``
    aligned to the host page [DOC]; the range inside one cudaMalloc block, or wholly mapped
    VMM memory of one device with one set of properties [DOC]; anything else -> 1 [INF].
    """
    p = driver.profile
    if handle_type != DMA_BUF_FD or flags not in (0, MAPPING_TYPE_PCIE):
        return E.INVALID_VALUE, None
    if not p.dma_buf_supported:
        return E.NOT_SUPPORTED, None
    if size == 0 or ptr % p.host_page_size or size % p.host_page_size:
        return E.INVALID_VALUE, None
    block = driver.device_owner(ptr)
    if block is not None:
        if ptr + size > block.end:
            return E.INVALID_VALUE, None
        detail = f"cudaMalloc block {block.base:#x}+{ptr - block.base:#x}"
        device = block.device
    else:
        covering = driver.vmm.mappings_covering(ptr, size)
        if not covering:
            return E.INVALID_VALUE, None
        physical = {(m.phys.device, m.phys.rdma_capable) for m in covering}
        if len(physical) != 1:
            return E.INVALID_VALUE, None
        device = covering[0].phys.device
        detail = f"{len(covering)} VMM mapping(s) from {covering[0].base:#x}"
    entry = dmabuf.export(size, ptr, f"cuda:{device}", detail)
    return 0, entry.fd


class GpuMemory:
    """What the RDMA fake asks of a node's GPUs: the allocation behind an address, and the
    BAR1 space GPUDirect RDMA takes through nvidia-peermem or a mapped dma-buf, one account
    per device (docs/cuda-runtime.md §14.4, §14.5)."""

    def __init__(self, driver: FakeDriver) -> None:
        self.driver = driver

    @property
    def peermem(self) -> bool:
        return self.driver.profile.peermem

    def owns(self, ptr: int) -> bool:
        """Device memory or a device reservation: never host memory the kernel could pin."""
        d = self.driver
        return d.device_owner(ptr) is not None or d.vmm.reservation_of(ptr) is not None

    def peer_check(self, ptr: int, length: int) -> tuple[int, int, int]:
        """What nvidia-peermem pinning ``[ptr, ptr+length)`` for an MR would do: (errno,
        device, BAR1 bytes), charging nothing. The range lies in one allocation GPUDirect
        RDMA may pin (a VMM allocation made without gpuDirectRDMACapable may not [DOC]);
        BAR1 takes whole 64 KiB GPU pages, and past its usable size the MR fails with the
        profile's ``bar1_exhausted_errno``."""
        d = self.driver
        rng = device_range(d, ptr)
        if not d.profile.peermem or rng is None or ptr + length > rng.end or \
                not rng.rdma_capable:
            return errno.EFAULT, -1, 0
        return self._bar1_check(rng.device, ptr, length, d.profile.bar1_exhausted_errno)

    def dmabuf_check(self, export: dmabuf.DmaBufExport) -> tuple[int, int, int]:
        """What an RDMA device mapping a dma-buf this GPU exported would do: (errno, device,
        BAR1 bytes), charging nothing; (0, -1, 0) for a dma-buf not of this GPU's memory.

        The exporter maps the whole dma-buf through BAR1 when an importer maps it
        (``nv-dmabuf.c`` ``nv_dma_buf_map`` -> ``rm_dma_buf_map_mem_handle``), and
        ``ib_umem_dmabuf_map_pages`` maps the whole attachment before trimming it to the
        MR; a failed map is NULL, which ``dma_buf_map_attachment`` turns into ENOMEM
        (docs/cuda-runtime.md §14.5 [INF])."""
        rng = device_range(self.driver, export.base) if self.owns(export.base) else None
        if rng is None or export.exporter != f"cuda:{rng.device}":
            return 0, -1, 0
        return self._bar1_check(rng.device, export.base, export.size, errno.ENOMEM)

    def _bar1_check(self, device: int, ptr: int, length: int,
                    exhausted: int) -> tuple[int, int, int]:
        """(errno, device, bytes) of mapping ``[ptr, ptr+length)`` of ``device`` through its
        BAR1, in whole 64 KiB GPU pages: ``exhausted`` past the usable size
        (``bar1_size - bar1_reserved``), charging nothing (docs/cuda-runtime.md §14.4)."""
        d = self.driver
        p = d.profile
        first = ptr // GPU_PAGE * GPU_PAGE
        pinned = -(-(ptr + length) // GPU_PAGE) * GPU_PAGE - first
        with d.lock:
            used = d.bar1_used.get(device, 0)
        if used + pinned > p.bar1_size - p.bar1_reserved:
            return exhausted, -1, 0
        return 0, device, pinned

    def backing(self, ptr: int, length: int) -> tuple[int, ...]:
        """The buffer ids of the physical memory behind ``[ptr, ptr+length)`` now: a
        cudaMalloc block's, or each VMM mapping's ``cuMemCreate`` handle's; () where part of
        it is not mapped. Ids are never reused [DOC], so memory unmapped and mapped again at
        the same address (torch_memory_saver's pause and resume, docs/gpu-rdma.md §7) has
        new ones."""
        d = self.driver
        block = d.device_owner(ptr)
        if block is not None:
            return (block.buffer_id,) if ptr + length <= block.end else ()
        covering = d.vmm.mappings_covering(ptr, max(length, 1))
        return tuple(m.phys.buffer_id for m in covering) if covering else ()

    def bar1_charge(self, device: int, nbytes: int) -> None:
        """Take (or, negative, give back) BAR1 bytes of ``device``."""
        with self.driver.lock:
            self.driver.bar1_used[device] = self.driver.bar1_used.get(device, 0) + nbytes
