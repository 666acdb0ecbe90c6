"""The simulated address space: virtual buffers and real ones (docs/cuda-runtime.md §11.1, §2.2)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kvreg.fakes import reserved
from kvreg.fakes.address_space import (
    VIRTUAL_BASE,
    VIRTUAL_LIMIT,
    AddressSpace,
    buffer_address,
)
from kvreg.fakes.cuda.fake_cuda import FakeCuda

GiB, TiB = 1 << 30, 1 << 40


def test_virtual_buffers_are_real_tensors_that_never_touch() -> None:
    # docs/cuda-runtime.md §11.1 interval model: separate buffers must not be adjacent (else
    # §5.4 "spans" applies); issue 18 §2: the code under test gets a real CPU tensor
    space = AddressSpace()
    a = space.virtual(3 * GiB, "uint8", name="a")
    b = space.virtual(5, "float16", name="b")
    assert type(a) is torch.Tensor and a.device.type == "cpu" and b.dtype == torch.float16
    assert a.data_ptr() < VIRTUAL_BASE                     # a real process address
    assert a.data_ptr() % (2 << 20) == 0 and b.data_ptr() % (2 << 20) == 0
    assert not (a.data_ptr() <= b.data_ptr() <= a.data_ptr() + a.nbytes)
    assert not (b.data_ptr() <= a.data_ptr() <= b.data_ptr() + b.nbytes)
    assert space.is_virtual(a.data_ptr()) and space.is_virtual(b.data_ptr() + 9)
    assert not space.is_virtual(b.data_ptr() + 10)         # one past its end
    assert space.is_virtual(space.reserve(4096))           # a bare reserved range: bit 60
    assert VIRTUAL_BASE <= space.reserve(4096) < VIRTUAL_LIMIT
    arr = np.zeros(4, np.uint8)
    space.track(arr)
    assert not space.is_virtual(arr.ctypes.data)
    space.release()


def test_huge_virtual_buffer_costs_no_ram_and_registers_in_chunks() -> None:
    # docs/cuda-runtime.md §2.2 "A single call of 512 GiB or more" -> 2; chunked succeeds
    fake = FakeCuda()
    pool = fake.virtual((4, TiB), "uint8", name="huge")
    assert pool.nbytes == 4 * TiB
    base = pool.data_ptr()
    assert int(fake.runtime.cudaHostRegister(base, 4 * TiB, 0)[0]) == 2
    chunk = 256 * GiB
    for off in range(0, 4 * TiB, chunk):
        assert int(fake.runtime.cudaHostRegister(base + off, chunk, 0)[0]) == 0
    assert len(fake.live_registrations()) == 16
    assert {r.buffer for r in fake.live_registrations()} == {"huge"}
    assert fake.space.release() == 0                        # nothing was touched


def test_a_range_past_a_virtual_buffer_is_not_mapped() -> None:
    # docs/cuda-runtime.md §2.2 row "range not fully mapped" -> 1: the buffer's mapping ends
    # at its end rounded up to a page; past it, a register fails
    fake = FakeCuda()
    buf = fake.virtual(3 * 4096 + 1, name="odd")
    base = buf.data_ptr()
    assert int(fake.runtime.cudaHostRegister(base, 4 * 4096 + 1, 0)[0]) == 1
    assert int(fake.runtime.cudaHostRegister(base, 4 * 4096, 0)[0]) == 0
    assert int(fake.runtime.cudaHostUnregister(base)[0]) == 0
    assert int(fake.runtime.cudaHostRegister(base - 4096, 8192, 0)[0]) == 1
    fake.space.release()


def test_release_frees_touched_pages_and_reports_them() -> None:
    space = AddressSpace()
    t = space.virtual((4, GiB), "uint8", name="pool")
    t[1, : 1 << 20] = 1
    res = reserved.reservation_of(t)
    assert res is not None and res.resident_bytes() == 1 << 20
    assert space.release() == 1 << 20
    assert res.resident_bytes() == 0 and int(t[1, :4096].sum()) == 0
    assert space.describe(t.data_ptr() + GiB) == "pool+0x40000000"  # traces still name it
    assert space.release() == 0


def test_owner_and_describe() -> None:
    # docs/cuda-runtime.md §11: traces name buffers, so reports say where a pointer is
    space = AddressSpace()
    t = space.virtual((2, 1024), "float32", name="kv")
    base = t.data_ptr()
    alloc, off = space.owner(base + 100)  # type: ignore[misc]
    assert alloc.name == "kv" and off == 100
    assert space.describe(base) == "kv"
    assert space.describe(base + 0x40) == "kv+0x40"
    assert space.describe(t[1].data_ptr()) == "kv+0x1000"
    assert space.owner(base + t.nbytes) is None
    assert space.describe(base - 1) == f"{base - 1:#x}"
    space.release()


def test_virtual_tensor_surface() -> None:
    # docs/pools.md §3: the SGLang test's buffer exposes data_ptr(), numel(), element_size();
    # issue 18 §2: stride(d), device.type, transpose (SGLang mha.py / mla.py page_first)
    space = AddressSpace()
    t = space.virtual((2, 3, 4), "bfloat16", name="kv")
    base = t.data_ptr()
    assert t.numel() == 24 and t.element_size() == 2 and t.nbytes == 48
    assert t.stride() == (12, 4, 1) and t.stride(0) == 12 and t.dim() == 3 and t.size(1) == 3
    assert t.device.type == "cpu" and t.transpose(0, 1).shape == (3, 2, 4)
    v = t[1]
    assert v.data_ptr() == base + 24 and v.shape == (3, 4)
    assert t[-1].data_ptr() == v.data_ptr()
    assert v.untyped_storage().data_ptr() == base
    assert v.untyped_storage().nbytes() == 48
    with pytest.raises(IndexError):
        t[2]
    assert t[0:1].shape == (1, 3, 4)
    t.some_attr = [1]                        # free attribute assignment, like tensors
    assert t.some_attr == [1]
    assert not t.is_pinned()
    space.release()


def test_track_real_buffers() -> None:
    # docs/cuda-runtime.md §9: buffers give their address
    fake = FakeCuda()
    arr = np.zeros(100, np.float32)
    fake.track(arr, name="scratch")
    assert buffer_address(arr) == (arr.ctypes.data, 400)
    assert fake.space.describe(arr.ctypes.data + 8) == "scratch+0x8"
    ba = bytearray(16)
    addr, n = buffer_address(ba)
    assert n == 16 and addr == np.frombuffer(ba, np.uint8).ctypes.data
    with pytest.raises(TypeError):
        buffer_address(3.5)


@pytest.mark.parametrize(("shape", "exc"), [((-1,), ValueError), ((1.5,), TypeError)])
def test_bad_shapes_rejected(shape: tuple[object, ...], exc: type[Exception]) -> None:
    space = AddressSpace()
    with pytest.raises(exc):
        space.virtual(shape, "uint8")  # type: ignore[arg-type]
    assert space.allocations() == []


def test_unknown_dtype_rejected() -> None:
    with pytest.raises(ValueError, match="unknown dtype"):
        AddressSpace().virtual(4, "float17")


def test_leak_report_names_the_buffer() -> None:
    # docs/cuda-runtime.md §2.2 "Memory registered this way must be released with
    # cudaHostUnregister" [DOC]: the fake reports what was not
    fake = FakeCuda()
    base = fake.virtual(8 << 20, name="kv_pool").data_ptr()
    assert fake.leak_report() == ""
    fake.runtime.cudaHostRegister(base + 4096, 4096, 0)
    report = fake.leak_report()
    assert "1 host registration" in report and "kv_pool + 0x1000" in report
    fake.runtime.cudaHostUnregister(base + 4096)
    assert fake.leak_report() == ""
