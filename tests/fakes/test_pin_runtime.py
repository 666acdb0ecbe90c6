"""The fake runtime's answers at edges only a wrong fake would change (fakes/cuda/cuda_runtime.py,
fakes/cuda/registry.py). Each was a surviving mutant (docs/mutation-testing.md)."""

from __future__ import annotations

from kvreg.fakes.address_space import AddressSpace
from kvreg.fakes.cuda.fake_cuda import FakeCuda

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
