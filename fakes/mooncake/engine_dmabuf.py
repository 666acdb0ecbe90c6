"""The engine's dma-buf path: how Mooncake built with CUDA registers device memory when it is
not told nvidia-peermem is there (docs/mooncake-verbs.md §8.9).

``RdmaContext::registerMemoryRegionInternal`` (``rdma_context.cpp``) asks the driver which
allocation holds the address, exports a dma-buf over it with ``cuMemGetHandleForAddressRange``
(flags 0), calls ``ibv_reg_dmabuf_mr(pd, offset, length, iova=addr, fd, access)`` and closes
the fd; a failed driver call or MR is -202 ERR_CONTEXT. What it exports changed twice, the
profile's ``engine_dmabuf_export``:

- ``range_size`` (v0.3.10 and earlier): ``CU_POINTER_ATTRIBUTE_RANGE_SIZE`` bytes from the
  address itself, offset 0, so an interior pointer exports past its block (Mooncake #2035);
- ``allocation`` (#2035's fix, v0.3.11 on): ``cuMemGetAddressRange``'s base and size, offset
  ``addr - base``; under expandable segments that is one 20 MiB mapping, and a tensor across
  two mappings makes ``offset + length`` exceed the dma-buf: EINVAL (Mooncake #2511);
- ``covering`` (#3538, the fix of #2511): where the allocation does not cover the length, the
  page-aligned range ``[addr, addr + length)`` itself, which may span contiguous mappings.
"""

from __future__ import annotations

from .. import dmabuf as dmabufs
from ..cuda import errors as cu
from ..cuda.device_memory import DMA_BUF_FD, GpuMemory, device_range, export_dmabuf
from ..verbs.dmabuf_mr import reg_dmabuf
from ..verbs.node import MrRecord, Nic

__all__ = ["DMABUF_EXPORTS", "GPU_REGISTRATIONS", "dmabuf_export", "reg_device_mr"]

GPU_REGISTRATIONS = ("peermem", "dmabuf")
DMABUF_EXPORTS = ("range_size", "allocation", "covering")


def dmabuf_export(gpu: GpuMemory, addr: int, length: int,
                  mode: str) -> tuple[int, int, int]:
    """(CUresult, fd, offset) of the engine's export for ``[addr, addr+length)``; a non-zero
    CUresult means the engine returns -202 before any MR is made."""
    rng = device_range(gpu.driver, addr)
    if rng is None:              # cuPointerGetAttribute / cuMemGetAddressRange fail
        return cu.INVALID_VALUE, -1, 0
    if mode == "range_size":
        base, size = addr, rng.range_size
    else:
        base, size = rng.base, rng.size
        if mode == "covering" and addr - base + length > size:
            page = gpu.driver.profile.host_page_size
            base = max(addr // page * page, rng.base)
            size = -(-(addr - base + length) // page) * page
    code, fd = export_dmabuf(gpu.driver, base, size, DMA_BUF_FD, 0)
    if code or fd is None:
        return code or cu.INVALID_VALUE, -1, 0
    return 0, fd, addr - base


def reg_device_mr(nic: Nic, gpu: GpuMemory, pd_id: int, addr: int, length: int, access: int,
                  mode: str) -> MrRecord | int:
    """One NIC's MR over device memory on the dma-buf path: the MR, or the CUresult of a
    failed export (the ``ibv_reg_dmabuf_mr`` errno raises PyverbsRDMAError). The fd is
    closed after the MR is made, as v0.3.11 on does; the MR keeps the dma-buf."""
    code, fd, offset = dmabuf_export(gpu, addr, length, mode)
    if code:
        return code
    try:
        return reg_dmabuf(nic, pd_id, offset, length, addr, fd, access,
                          owner="mooncake.engine")
    finally:
        dmabufs.release(fd)
