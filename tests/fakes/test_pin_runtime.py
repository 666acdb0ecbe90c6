"""The fake runtime's answers at edges only a wrong fake would change (fakes/cuda/cuda_runtime.py,
fakes/cuda/registry.py). Each was a surviving mutant (docs/mutation-testing.md)."""

from __future__ import annotations

from kvreg.fakes.address_space import AddressSpace
from kvreg.fakes.cuda.fake_cuda import FakeCuda
from kvreg.fakes.cuda.registry import Pinned, PinnedRegistry

MiB = 1 << 20
CUDA_SUCCESS, INVALID_VALUE = 0, 1
MEMTYPE_UNREGISTERED, MEMTYPE_HOST = 0, 1


def test_mem_get_info_succeeds_with_its_numbers() -> None:
    # cudaMemGetInfo returns cudaSuccess (0) with free <= total: a caller reads the numbers
    # only after checking the code
    rt = FakeCuda("h200-r580").cuda_runtime
    code, free, total = rt.mem_get_info()
    assert code == CUDA_SUCCESS
    assert free is not None and total is not None and 0 < free <= total


def test_the_byte_past_a_registration_is_not_pinned() -> None:
    # docs/cuda-runtime.md §4: a registered range [base, base + size) is pinned; the byte at
    # base + size is ordinary pageable memory (cudaPointerGetAttributes: type Unregistered;
    # cudaHostGetDevicePointer: 1 cudaErrorInvalidValue)
    fake = FakeCuda("h200-r580")
    rt = fake.cuda_runtime
    space = AddressSpace()
    buf = space.virtual(2 * MiB, name="pool")
    base = buf.data_ptr()
    assert rt.host_register(base, MiB, 0) == CUDA_SUCCESS
    code, last = rt.pointer_get_attributes(base + MiB - 1)
    assert code == CUDA_SUCCESS and last is not None and last.type == MEMTYPE_HOST
    code, past = rt.pointer_get_attributes(base + MiB)
    assert code == CUDA_SUCCESS and past is not None and past.type == MEMTYPE_UNREGISTERED
    assert rt.host_get_device_pointer(base + MiB - 1, 0)[0] == CUDA_SUCCESS
    assert rt.host_get_device_pointer(base + MiB, 0) == (INVALID_VALUE, None)
    assert rt.host_unregister(base) == CUDA_SUCCESS
    space.release()


def _registry(*ranges: tuple[int, int]) -> PinnedRegistry:
    reg = PinnedRegistry()
    for i, (base, size) in enumerate(ranges):
        reg.add(Pinned(base, size, 0, "register", 0, i + 1, base))
    return reg


def test_page_overlap_rounds_the_query_out_to_whole_pages() -> None:
    # the driver pins whole 4 KiB pages (docs/cuda-runtime.md §2): in "page" mode a query
    # ending one byte into a page meets a registration later in that page, and one ending
    # on a page boundary does not meet the next page's
    page = 4096
    at = 16 * page
    reg = _registry((at + 100, 64))
    assert reg.first_overlap(at - 64, 65, "page") is not None        # ends at at + 1
    assert reg.first_overlap(at - 64, 65, "byte") is None
    nxt = _registry((at, 64))
    assert nxt.first_overlap(at - 64, 64, "page") is None             # ends at at exactly


def test_page_overlap_rounds_the_query_start_down_to_its_page() -> None:
    # docs/cuda-runtime.md §2 and §11.1: with overlap_granularity = "page" a registration
    # owns its whole 4 KiB pages, so a query starting late in a page meets a registration
    # earlier in that page, and a query on the next page does not meet it. The page has
    # bit 12 set (17 pages in), so a mask that is not exactly ~(PAGE - 1) moves the start.
    page = 4096
    at = 17 * page
    same = _registry((at, 64))
    assert same.first_overlap(at + 200, 64, "page") is not None
    assert same.first_overlap(at + 200, 64, "byte") is None
    before = _registry((at - page, 64))
    assert before.first_overlap(at + 100, 64, "page") is None
    assert before.first_overlap(at, 1, "page") is None
    assert before.first_overlap(at - 1, 1, "page") is not None


def test_host_allocations_are_numbered_in_creation_order() -> None:
    # a leak report lists pinned memory in the order it was made (registry.Pinned.seq)
    fake = FakeCuda("h200-r580")
    rt = fake.cuda_runtime
    first, second = rt.host_alloc(4096, 0)[1], rt.host_alloc(4096, 0)[1]
    assert first and second
    a, b = fake.driver.pinned.get(first), fake.driver.pinned.get(second)
    assert a is not None and b is not None and 0 < a.seq < b.seq
    assert rt.free_host(first) == 0 and rt.free_host(second) == 0
