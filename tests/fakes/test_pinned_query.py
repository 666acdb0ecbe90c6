"""``Tensor.is_pinned()`` under the fake: what a CUDA build of torch would answer.

torch's ``CUDAHooks::isPinnedPtr`` (aten/src/ATen/cuda/detail/CUDAHooks.cpp) asks
``cudaPointerGetAttributes`` about ``self.storage().data()``; registered memory has type
Host (docs/cuda-runtime.md §4 [DOC]).
"""

from __future__ import annotations

import torch

from kvreg.fakes import FakeCuda

GiB = 1 << 30


def test_is_pinned_follows_the_registration_of_the_storage_base() -> None:
    fake = FakeCuda()
    pool = fake.virtual((4, GiB), name="pool")
    other = fake.virtual(GiB, name="other")
    base = pool.data_ptr()
    with fake.patch():
        assert not pool.is_pinned()
        assert int(fake.runtime.cudaHostRegister(base, GiB, 0)[0]) == 0
        assert pool.is_pinned() and pool[3].is_pinned()   # a view asks about its storage base
        assert not other.is_pinned()
        assert not torch.zeros(4).is_pinned()             # memory nobody registered
        assert int(fake.runtime.cudaHostUnregister(base)[0]) == 0
        assert not pool.is_pinned()
        assert int(fake.runtime.cudaHostRegister(base + GiB, GiB, 0)[0]) == 0
        assert not pool[1].is_pinned()                    # registered, but not its storage base
        assert len(fake.trace) == 3                       # torch's own query is not a call
    fake.runtime.cudaHostUnregister(base + GiB)
    assert not pool.is_pinned()                           # unpatched: CPU-only torch says False
    fake.space.release()


def test_is_pinned_is_false_where_the_profile_has_no_cuda() -> None:
    # CUDAHooks::isPinnedPtr: "if (!at::cuda::is_available()) return false"
    fake = FakeCuda("no-gpu")
    other = FakeCuda()
    buf = other.virtual(GiB)
    other.runtime.cudaHostRegister(buf.data_ptr(), GiB, 0)
    fake.track(buf)
    fake.driver.pinned = other.driver.pinned
    with fake.patch():
        assert not buf.is_pinned()
    with other.patch():
        assert buf.is_pinned()
    other.runtime.cudaHostUnregister(buf.data_ptr())
    other.space.release()
