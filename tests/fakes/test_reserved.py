"""Reserved buffers are real torch tensors of any size that cost no RAM until touched.

Issue 18 §2: pool code calls whatever torch offers on its buffer (SGLang's mha.py / mla.py
page_first layouts transpose it, sglang-style code reads ``stride(0)`` and ``device.type``).
"""

from __future__ import annotations

import resource

import pytest
import torch

from kvreg.fakes import procmaps, reserved

GiB, TiB = 1 << 30, 1 << 40


def test_a_reserved_buffer_is_a_cpu_tensor_with_every_method() -> None:
    t = reserved.reserve_tensor(shape=(2, 4, 8, 16), dtype="bfloat16", name="kv")
    try:
        assert type(t) is torch.Tensor and t.device.type == "cpu" and t.dtype == torch.bfloat16
        assert t.stride(0) == 4 * 8 * 16 and t.size(1) == 4 and t.element_size() == 2
        assert t.is_contiguous() and not t.is_pinned()
        base = t.data_ptr()
        assert base % reserved.DEFAULT_ALIGN == 0
        assert t[1].data_ptr() == base + 4 * 8 * 16 * 2
        assert t.transpose(0, 1).shape == (4, 2, 8, 16) and not t.transpose(0, 1).is_contiguous()
        assert t.narrow(1, 2, 2).data_ptr() == base + 2 * 8 * 16 * 2
        assert t.view(-1).shape == (2 * 4 * 8 * 16,) and t.reshape(8, -1).shape == (8, 128)
        assert t[:, 1:3].data_ptr() == base + 8 * 16 * 2
        storage = t[1].untyped_storage()
        assert storage.data_ptr() == base and storage.nbytes() == t.nbytes
        t.host_ranges = [(base, t.nbytes)]                  # SGLang sets an attribute on it
        assert t.host_ranges == [(base, t.nbytes)]
        t[1, 2, 3, 4] = 7.0                                 # real bytes: writes read back
        assert float(t[1, 2, 3, 4]) == 7.0 and float(t.sum()) == 7.0
    finally:
        reserved.release(t)


def test_the_mapping_ends_at_the_page_rounded_end() -> None:
    # docs/cuda-runtime.md §2.2 "range not fully mapped": a range past the buffer's last page
    # is not mapped memory, whatever was mapped next
    t = reserved.reserve_tensor(5 * 4096 + 10, name="odd")
    try:
        base = t.data_ptr()
        maps = procmaps.process_maps()
        assert maps.is_mapped(base, 6 * 4096, fresh=True)
        assert not maps.is_mapped(base, 6 * 4096 + 1, fresh=True)
        assert not maps.is_mapped(base - 1, 2, fresh=True)
    finally:
        reserved.release(t)


def test_a_4_tib_buffer_costs_no_ram_and_the_touched_pages_are_counted() -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = reserved.reserve_tensor(4 * TiB, dtype="float16", name="huge")
    res = reserved.reservation_of(t[TiB:])
    assert res is not None and res.nbytes == 4 * TiB and res.resident_bytes() == 0
    t[: 1 << 19].fill_(1)                                  # 1 MiB touched
    assert res.resident_bytes() == 1 << 20
    assert reserved.release(t) and res.resident_bytes() == 0
    assert float(t[0]) == 0.0                              # released pages read as zeros
    del t
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 64 << 10  # KiB


def test_released_buffers_give_the_address_space_back() -> None:
    # 200 x 4 TiB is six times the 128 TiB user address space of x86-64
    # names no other test of the worker uses: another test's buffer named "pool" may still
    # be alive here in a shuffled order
    for i in range(200):
        t = reserved.reserve_tensor(4 * TiB, name=f"given-back-{i}")
        view = t[GiB:]
        reserved.release(t)
        del t, view
    assert not [r for r in reserved.live() if r.name.startswith("given-back-")]


def test_a_held_view_keeps_the_mapping_until_it_is_dropped() -> None:
    t = reserved.reserve_tensor(8192, name="held")
    view = t[4096:]
    reserved.release(t)
    del t
    assert [r.name for r in reserved.live()].count("held") == 1
    assert int(view.sum()) == 0                            # still readable, never a crash
    del view
    assert "held" not in [r.name for r in reserved.live()]


@pytest.mark.parametrize(("kwargs", "exc", "text"), [
    ({}, TypeError, "needs nbytes or shape"),
    ({"nbytes": -1}, ValueError, ">= 0"),
    ({"nbytes": 3, "dtype": "float16"}, ValueError, "multiple of the itemsize"),
    ({"nbytes": 8, "shape": (3,)}, ValueError, "not nbytes=8"),
    ({"shape": (2, -1)}, ValueError, "negative dimension"),
    ({"shape": (1 << 40, 1 << 40)}, ValueError, "2**63 - 1"),
    ({"nbytes": 1 << 50}, MemoryError, "ENOMEM"),
    ({"nbytes": 4096, "align": 3}, ValueError, "power of two"),
    ({"nbytes": 4096, "dtype": "float7"}, ValueError, "unknown dtype"),
])
def test_bad_sizes_are_refused_and_map_nothing(kwargs: dict[str, object], exc: type,
                                               text: str) -> None:
    before = {r.base for r in reserved.live()}
    with pytest.raises(exc, match=text.replace("*", r"\*")):
        reserved.reserve_tensor(**kwargs)  # type: ignore[arg-type]
    assert {r.base for r in reserved.live()} <= before      # (a collection may end some)
