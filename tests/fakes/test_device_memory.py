"""Device memory in the fake driver: cudaMalloc blocks, VMM and dma-buf fds.

docs/cuda-runtime.md §14. The rules are the docstrings of ``cuda.bindings.driver`` (cuda-bindings
13.5.0, NVIDIA's text) unless a test names another source.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import pytest

from kvreg.fakes import dmabuf
from kvreg.fakes.cuda.fake_cuda import FakeCuda
from kvreg.fakes.cuda.profile import PROFILES
from kvreg.fakes.cuda.symbols import NotModelledError

from ..helpers.gpu_memory import Access as _Access
from ..helpers.gpu_memory import Prop as _Prop
from ..helpers.gpu_memory import expandable_segment, ready_driver

MiB = 1 << 20
GiB = 1 << 30
NOT_FOUND, INVALID_VALUE, NOT_SUPPORTED, INVALID_CONTEXT = 500, 1, 801, 201
RANGE_START, RANGE_SIZE, BUFFER_ID, GDR_CAPABLE, MEMORY_TYPE = 11, 12, 7, 15, 2


def _driver(profile: str = "h200-r580") -> tuple[FakeCuda, Any]:
    fake = FakeCuda(profile)
    return fake, ready_driver(fake)


# -- cudaMalloc blocks (§14.1) ---------------------------------------------------------------

def test_blocks_are_aligned_and_interior_pointers_find_their_block() -> None:
    # §14.1: at least 256 B aligned [DOC: Programming Guide]; cuMemGetAddressRange returns the
    # base and size of the allocation containing dptr [DOC]; Mooncake #2035 needs them
    fake, drv = _driver()
    err, p = drv.cuMemAlloc(10 * MiB + 3)
    assert int(err) == 0
    assert int(p) % 256 == 0 and int(p) % fake.profile.malloc_alignment == 0
    err, base, size = drv.cuMemGetAddressRange(int(p) + 7 * MiB + 12345)
    assert int(err) == 0 and (int(base), size) == (int(p), 10 * MiB + 3)
    # the byte past the end belongs to no allocation: CUDA_ERROR_NOT_FOUND [DOC]
    assert int(drv.cuMemGetAddressRange(int(p) + 10 * MiB + 3)[0]) == NOT_FOUND
    assert int(drv.cuMemFree(int(p) + 256)[0]) == INVALID_VALUE     # not the base [INF]
    assert int(drv.cuMemFree(p)[0]) == 0
    assert int(drv.cuMemGetAddressRange(p)[0]) == NOT_FOUND


def test_zero_bytes_and_too_much_fail() -> None:
    # cuMemAlloc(0) -> CUDA_ERROR_INVALID_VALUE [DOC]; more than is free -> 2
    fake, drv = _driver()
    assert drv.cuMemAlloc(0) == (drv.CUresult(INVALID_VALUE), None)
    assert int(drv.cuMemAlloc(fake.profile.total_memory + 1)[0]) == 2


def test_runtime_blocks_are_the_drivers() -> None:
    # cudaMalloc through any face is a driver allocation that cuMemGetAddressRange finds
    fake, drv = _driver()
    err, p = fake.runtime.cudaMalloc(3 * MiB)
    assert int(err) == 0
    _, base, size = drv.cuMemGetAddressRange(p + MiB)
    assert (int(base), size) == (p, 3 * MiB)


def test_buffer_ids_are_unique_and_never_reused() -> None:
    # §14.1: BUFFER_ID unique per allocation, not reused after a free [DOC]
    _, drv = _driver()
    _, a = drv.cuMemAlloc(MiB)
    id_a = drv.cuPointerGetAttribute(BUFFER_ID, int(a) + 100)[1]
    assert int(drv.cuMemFree(a)[0]) == 0
    _, b = drv.cuMemAlloc(MiB)
    id_b = drv.cuPointerGetAttribute(BUFFER_ID, b)[1]
    assert id_a != id_b and id_a > 0


def test_host_buffer_id_is_not_modelled() -> None:
    fake, drv = _driver()
    base = fake.virtual(MiB).data_ptr()
    assert int(drv.cuMemHostRegister(base, MiB, 0)[0]) == 0
    with pytest.raises(NotModelledError, match="host memory"):
        drv.cuPointerGetAttribute(BUFFER_ID, base)
    assert int(drv.cuMemHostUnregister(base)[0]) == 0


def test_memory_calls_need_a_current_context() -> None:
    # docs/cuda-runtime.md §13.1: memory calls on a thread with no context -> 201
    _, drv = _driver()
    out: list[int] = []
    worker = threading.Thread(target=lambda: out.append(int(drv.cuMemAlloc(MiB)[0])))
    worker.start()
    worker.join()
    assert out == [INVALID_CONTEXT]


# -- VMM (§14.2) -------------------------------------------------------------------------------

def test_granularity_is_two_mib_for_pinned_device_memory() -> None:
    _, drv = _driver()
    assert drv.cuMemGetAllocationGranularity(_Prop(), 0) == (drv.CUresult(0), 2 * MiB)
    assert drv.cuMemGetAllocationGranularity(_Prop(), 1) == (drv.CUresult(0), 2 * MiB)
    assert int(drv.cuMemGetAllocationGranularity(_Prop(kind=0), 0)[0]) == INVALID_VALUE


def test_address_range_is_the_mapping_and_range_start_the_reservation() -> None:
    # §14.2: a tensor in an expandable segment: cuMemGetAddressRange gives its 20 MiB mapping
    # only (Mooncake #2511) [OBS-ext]; RANGE_START/SIZE give the reservation [DOC]
    _, drv = _driver()
    va, _ = expandable_segment(drv)
    tensor = va + 20 * MiB + 5 * MiB            # a tensor inside the second mapping
    err, base, size = drv.cuMemGetAddressRange(tensor)
    assert int(err) == 0 and (int(base), size) == (va + 20 * MiB, 20 * MiB)
    assert int(drv.cuPointerGetAttribute(RANGE_START, tensor)[1]) == va
    assert drv.cuPointerGetAttribute(RANGE_SIZE, tensor)[1] == 8 * GiB
    assert drv.cuPointerGetAttribute(MEMORY_TYPE, tensor)[1] == 2
    # the reservation past the mappings holds nothing [INF]
    assert int(drv.cuMemGetAddressRange(va + 60 * MiB)[0]) == NOT_FOUND


def test_vmm_argument_rules() -> None:
    # §14.2: sizes, addresses and offsets multiples of the granularity; no mapping over a
    # mapping; offset + size within the handle; unmap a whole mapping [DOC]
    _, drv = _driver()
    assert int(drv.cuMemCreate(3 * MiB, _Prop(), 0)[0]) == INVALID_VALUE
    assert int(drv.cuMemAddressReserve(3 * MiB, 0, 0, 0)[0]) == INVALID_VALUE
    assert int(drv.cuMemAddressReserve(4 * MiB, 3 * MiB, 0, 0)[0]) == INVALID_VALUE
    _, va = drv.cuMemAddressReserve(64 * MiB, 0, 0, 0)
    _, h = drv.cuMemCreate(8 * MiB, _Prop(), 0)
    v = int(va)
    assert int(drv.cuMemMap(v + MiB, 2 * MiB, 0, h, 0)[0]) == INVALID_VALUE     # misaligned
    assert int(drv.cuMemMap(v, 4 * MiB, 6 * MiB, h, 0)[0]) == INVALID_VALUE     # past handle
    assert int(drv.cuMemMap(v + 62 * MiB, 4 * MiB, 0, h, 0)[0]) == INVALID_VALUE  # past res
    assert int(drv.cuMemMap(v, 8 * MiB, 0, h, 0)[0]) == 0
    assert int(drv.cuMemMap(v + 6 * MiB, 2 * MiB, 0, h, 0)[0]) == INVALID_VALUE  # overlap
    assert int(drv.cuMemSetAccess(v, 16 * MiB, [_Access()], 1)[0]) == INVALID_VALUE  # gap
    assert int(drv.cuMemUnmap(v, 2 * MiB)[0]) == INVALID_VALUE                 # a part
    assert int(drv.cuMemAddressFree(v, 64 * MiB)[0]) == INVALID_VALUE          # still mapped
    assert int(drv.cuMemRelease(h)[0]) == 0        # released, still mapped: memory lives
    assert int(drv.cuMemGetAddressRange(v)[0]) == 0
    assert int(drv.cuMemUnmap(v, 8 * MiB)[0]) == 0
    assert int(drv.cuMemRelease(h)[0]) == INVALID_VALUE                        # gone [INF]
    assert int(drv.cuMemAddressFree(v, 32 * MiB)[0]) == INVALID_VALUE          # not its size
    assert int(drv.cuMemAddressFree(v, 64 * MiB)[0]) == 0


def test_gpudirect_capability_follows_the_allocation_flag() -> None:
    # §14.1 / §14.4: IS_GPU_DIRECT_RDMA_CAPABLE: cudaMalloc yes; VMM only with the flag [INF]
    _, drv = _driver()
    plain, _ = expandable_segment(drv, mappings=1)
    capable, _ = expandable_segment(drv, mappings=1, rdma=True)
    _, block = drv.cuMemAlloc(MiB)
    assert drv.cuPointerGetAttribute(GDR_CAPABLE, plain)[1] is False
    assert drv.cuPointerGetAttribute(GDR_CAPABLE, capable)[1] is True
    assert drv.cuPointerGetAttribute(GDR_CAPABLE, block)[1] is True


# -- cuMemGetHandleForAddressRange (§14.3) ---------------------------------------------------

def test_dmabuf_fd_is_a_real_descriptor_for_the_range() -> None:
    _, drv = _driver()
    _, p = drv.cuMemAlloc(8 * MiB)
    err, fd = drv.cuMemGetHandleForAddressRange(int(p) + 4096, 2 * MiB, 1, 0)
    assert int(err) == 0
    entry = dmabuf.lookup(fd)
    assert not isinstance(entry, int)
    assert (entry.base, entry.size) == (int(p) + 4096, 2 * MiB)
    os.fstat(fd)                          # an open descriptor of this process
    os.close(fd)
    assert dmabuf.lookup(fd) in (9, 22)   # EBADF, or EINVAL once the number is reused


@pytest.mark.parametrize(("offset", "size", "handle_type", "flags"), [
    (100, 4096, 1, 0),            # dptr not host-page aligned [DOC]
    (0, 4097, 1, 0),              # size not host-page aligned [DOC]
    (0, 16 * MiB, 1, 0),          # past the block [INF]
    (0, 0, 1, 0),
    (0, 4096, 2, 0),              # not DMA_BUF_FD
    (0, 4096, 1, 4),              # flags other than MAPPING_TYPE_PCIE
])
def test_dmabuf_range_rules(offset: int, size: int, handle_type: int, flags: int) -> None:
    _, drv = _driver()
    _, p = drv.cuMemAlloc(8 * MiB)
    assert drv.cuMemGetHandleForAddressRange(int(p) + offset, size, handle_type, flags) == \
        (drv.CUresult(INVALID_VALUE), None)


def test_dmabuf_over_vmm_needs_every_byte_mapped_alike() -> None:
    # §14.3: a reserved range fully mapped, physical allocations alike [DOC]
    _, drv = _driver()
    va, _ = expandable_segment(drv, mappings=3)
    err, fd = drv.cuMemGetHandleForAddressRange(va, 60 * MiB, 1, 0)    # three mappings
    assert int(err) == 0
    os.close(fd)
    assert int(drv.cuMemGetHandleForAddressRange(va, 80 * MiB, 1, 0)[0]) == INVALID_VALUE
    _, h = drv.cuMemCreate(20 * MiB, _Prop(rdma=True), 0)
    assert int(drv.cuMemMap(va + 60 * MiB, 20 * MiB, 0, h, 0)[0]) == 0
    assert int(drv.cuMemGetHandleForAddressRange(va, 80 * MiB, 1, 0)[0]) == INVALID_VALUE


def test_dmabuf_unsupported_device_gives_not_supported() -> None:
    # §14.3: CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED false (mscclpp #657) -> 801 [INF]
    fake = FakeCuda(PROFILES["h200-r580"].replace(dma_buf_supported=False))
    drv = fake.driver_api
    drv.cuInit(0)
    drv.cuCtxSetCurrent(drv.cuDevicePrimaryCtxRetain(0)[1])
    _, p = drv.cuMemAlloc(MiB)
    assert int(drv.cuMemGetHandleForAddressRange(p, MiB, 1, 0)[0]) == NOT_SUPPORTED


def test_the_real_bindings_objects_are_accepted() -> None:
    # the face reads cuda-bindings' own CUmemAllocationProp / CUmemAccessDesc
    real = pytest.importorskip("cuda.bindings.driver", reason="cuda-bindings is not installed")
    _, drv = _driver()
    prop = real.CUmemAllocationProp()
    prop.type = real.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    prop.location.type = real.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    prop.location.id = 0
    prop.allocFlags.gpuDirectRDMACapable = 1
    err, handle = drv.cuMemCreate(2 * MiB, prop, 0)
    assert int(err) == 0 and isinstance(handle, real.CUmemGenericAllocationHandle)
    _, va = drv.cuMemAddressReserve(2 * MiB, 0, 0, 0)
    assert int(drv.cuMemMap(va, 2 * MiB, 0, handle, 0)[0]) == 0
    desc = real.CUmemAccessDesc()
    desc.location.type = real.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    desc.location.id = 0
    desc.flags = real.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE
    assert int(drv.cuMemSetAccess(va, 2 * MiB, [desc], 1)[0]) == 0
    assert drv.cuPointerGetAttribute(GDR_CAPABLE, va)[1] is True


def test_pointer_get_attributes_answers_in_one_call_and_defaults_to_null() -> None:
    # cuPointerGetAttributes: no error for a pointer CUDA does not know, NULL values [DOC];
    # NIXL's CudaAcceleratorDevice asks MEMORY_TYPE, IS_MANAGED, DEVICE_ORDINAL, CONTEXT
    fake, drv = _driver()
    _, p = drv.cuMemAlloc(4 * MiB)
    attrs = [MEMORY_TYPE, 8, 9, 1]
    err, values = drv.cuPointerGetAttributes(4, attrs, int(p) + MiB)
    assert int(err) == 0
    assert values[:3] == [2, False, 0]
    assert int(values[3]) == fake.driver.contexts.primary(0)
    host = fake.virtual(MiB).data_ptr()
    err, values = drv.cuPointerGetAttributes(4, attrs, host)
    assert int(err) == 0 and values[:3] == [0, False, 0] and int(values[3]) == 0
    assert int(drv.cuPointerGetAttributes(3, attrs, host)[0]) == INVALID_VALUE


def test_device_attributes_registration_code_asks() -> None:
    # §14.3: CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED (124) follows the profile [DOC attribute];
    # GPU_DIRECT_RDMA_SUPPORTED (116) and _WITH_CUDA_VMM_SUPPORTED (110) 1 [INF]
    _, drv = _driver()
    assert drv.cuDeviceGetAttribute(124, 0) == (drv.CUresult(0), 1)
    assert drv.cuDeviceGetAttribute(116, 0) == (drv.CUresult(0), 1)
    assert int(drv.cuDeviceGetAttribute(124, 5)[0]) == 101
    off = FakeCuda(PROFILES["h200-r580"].replace(dma_buf_supported=False)).driver_api
    off.cuInit(0)
    assert off.cuDeviceGetAttribute(124, 0)[1] == 0
    with pytest.raises(NotModelledError):
        drv.cuDeviceGetAttribute(1, 0)


def test_traces_name_vmm_mappings() -> None:
    fake, drv = _driver()
    va, handles = expandable_segment(drv, mappings=2)
    assert fake.space.describe(va + 20 * MiB + 4096).startswith(f"vmm{handles[1]:#x}")
    assert int(drv.cuMemUnmap(va + 20 * MiB, 20 * MiB)[0]) == 0
    assert fake.space.describe(va + 20 * MiB + 4096) == hex(va + 20 * MiB + 4096)
