"""The store moves the bytes of any registered process memory, with no tracking call.

``register_buffer`` -> ``registerLocalMemory`` -> ``ibv_reg_mr`` on every device
(docs/mooncake-verbs.md §1.5): the kernel pins the range (umem.c ``ib_umem_get``), so an unmapped
range fails there with EFAULT and the store collapses the TE error into INVALID_PARAMS
(-600, §1.4). Registered memory is then read by ``put_from`` and written by ``get_into``
in place, as the real transfer engine's DMA does.
"""

from __future__ import annotations

import ctypes
import mmap
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch

from kvreg.fakes.mooncake import ErrorCode, FakeMooncake
from kvreg.fakes.procmaps import available

pytestmark = pytest.mark.skipif(not available(), reason="needs Linux /proc/self/maps")

Mk = Callable[..., tuple[FakeMooncake, Any]]
INVALID = int(ErrorCode.INVALID_PARAMS)


def _plain(kind: str, n: int, seed: int) -> tuple[Any, int, Callable[[], bytes]]:
    data = np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)
    if kind == "numpy":
        arr = data.copy()
        return arr, int(arr.ctypes.data), lambda: arr.tobytes()
    if kind == "bytearray":
        ba = bytearray(data.tobytes())
        return ba, ctypes.addressof(ctypes.c_char.from_buffer(ba)), lambda: bytes(ba)
    ten = torch.from_numpy(data.copy())
    return ten, int(ten.data_ptr()), lambda: ten.numpy().tobytes()


@pytest.mark.parametrize("profile", ["released", "head"])
@pytest.mark.parametrize("kind", ["numpy", "bytearray", "torch"])
def test_put_from_and_get_into_plain_memory(mk: Mk, kind: str, profile: str) -> None:
    fake, store = mk(profile)
    n = 3 * 4096 + 5
    _src, sptr, sbytes = _plain(kind, n, 1)
    _dst, dptr, dbytes = _plain(kind, n, 2)
    assert store.register_buffer(sptr, n) == 0
    assert store.register_buffer(dptr, n) == 0
    assert store.put_from("k", sptr, n) == 0
    assert store.get_into("k", dptr, n) == n
    assert dbytes() == sbytes()
    assert store.get("k") == sbytes()
    assert fake.node().space.allocations() == [a for a in fake.node().space.allocations()
                                               if a.kind != "real"]   # nothing was tracked
    assert store.unregister_buffer(sptr) == 0 and store.unregister_buffer(dptr) == 0


def test_batch_calls_on_plain_memory(mk: Mk) -> None:
    _fake, store = mk("released")
    srcs = [np.full(512, i + 1, np.uint8) for i in range(3)]
    dst = np.zeros(3 * 512, np.uint8)
    for s in srcs:
        assert store.register_buffer(int(s.ctypes.data), 512) == 0
    assert store.register_buffer(int(dst.ctypes.data), dst.nbytes) == 0
    keys = ["a", "b", "c"]
    assert store.batch_put_from(keys, [int(s.ctypes.data) for s in srcs], [512] * 3) == [0] * 3
    ptrs = [int(dst.ctypes.data) + 512 * i for i in range(3)]
    assert store.batch_get_into(keys, ptrs, [512] * 3) == [512] * 3
    assert np.array_equal(dst, np.concatenate(srcs))


def test_unmapped_range_fails_to_register_and_changes_nothing(mk: Mk) -> None:
    fake, store = mk("released")
    m = mmap.mmap(-1, 2 * mmap.PAGESIZE)
    view = ctypes.c_char.from_buffer(m)
    addr = ctypes.addressof(view)
    del view
    m.close()                                    # unmapped now
    before = fake.fabric.live_mrs()
    assert store.register_buffer(addr, 2 * mmap.PAGESIZE) == INVALID
    assert fake.fabric.live_mrs() == before and store.registered_buffers() == []
    reg = fake.fabric.trace.calls("reg_mr")[-1]
    assert reg.code == 14                        # EFAULT from pinning (§5.2)


def test_unregistered_plain_memory_still_fails_on_rdma(mk: Mk) -> None:
    # §1.3: unregistered local buffer on the RDMA path -> TRANSFER_FAIL; plain memory does
    # not make registration optional
    _fake, store = mk("released")
    arr = np.ones(4096, np.uint8)
    assert store.put_from("k", int(arr.ctypes.data), 4096) == int(ErrorCode.TRANSFER_FAIL)
