"""Registered process memory: any mapped range registers and moves bytes with no tracking.

Real verbs pin whatever the process has mapped (drivers/infiniband/core/umem.c
``ib_umem_get`` -> ``pin_user_pages``) and the NIC reads and writes those pages in place;
an unmapped page fails registration with EFAULT, and a writable MR over a read-only
mapping fails the same way (pinning with FOLL_WRITE, ``ib_access_writable``)
(docs/mooncake-verbs.md §5.2). Code written for real pyverbs never calls ``track``.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kvreg.fakes.procmaps import ProcessMaps, available
from kvreg.fakes.verbs import PyverbsRDMAError, UntrackedMemoryError
from kvreg.fakes.verbs.enums import ibv_access_flags as A
from kvreg.fakes.verbs.enums import ibv_wr_opcode as OP

pytestmark = pytest.mark.skipif(not available(), reason="needs Linux /proc/self/maps")

Pair = tuple[Any, Any]
LW = int(A.IBV_ACCESS_LOCAL_WRITE)
RW = int(A.IBV_ACCESS_LOCAL_WRITE | A.IBV_ACCESS_REMOTE_WRITE | A.IBV_ACCESS_REMOTE_READ)

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]


@pytest.fixture
def pages() -> Iterator[tuple[int, int]]:
    """Three fresh anonymous pages (address, page size); unmapped afterwards."""
    size = mmap.PAGESIZE
    addr = _libc.mmap(None, 3 * size, mmap.PROT_READ | mmap.PROT_WRITE,
                      mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    assert addr not in (None, ctypes.c_void_p(-1).value)
    ctypes.memset(addr, 0x5A, 3 * size)
    yield int(addr), size
    _libc.munmap(addr, 3 * size)


def _buffers(n: int, seed: int) -> list[tuple[str, Any, int]]:
    """(kind, object, address) of plain process buffers, never tracked."""
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, n, dtype=np.uint8)
    arr = data.copy()
    ba = bytearray(data.tobytes())
    ten = torch.from_numpy(data.copy())
    ba_addr = ctypes.addressof(ctypes.c_char.from_buffer(ba))
    return [("numpy", arr, int(arr.ctypes.data)), ("bytearray", ba, ba_addr),
            ("torch", ten, int(ten.data_ptr()))]


def _bytes(obj: Any) -> bytes:
    if isinstance(obj, torch.Tensor):
        return bytes(obj.numpy().tobytes())
    return bytes(np.asarray(memoryview(obj)).tobytes())


@pytest.mark.parametrize("kind", ["numpy", "bytearray", "torch"])
@pytest.mark.parametrize("op", [OP.IBV_WR_RDMA_WRITE, OP.IBV_WR_RDMA_READ])
def test_rdma_moves_bytes_of_untracked_process_memory(pair: Pair, kind: str, op: int) -> None:
    a, b = pair
    n = 4096 + 123
    (_, src, sptr), = [x for x in _buffers(n, 1) if x[0] == kind]
    (_, dst, dptr), = [x for x in _buffers(n, 2) if x[0] == kind]
    want = _bytes(src)
    M = a.mods["pyverbs.mr"].MR
    if op == OP.IBV_WR_RDMA_WRITE:
        lmr, rmr = M(a.pd, n, RW, address=sptr), M(b.pd, n, RW, address=dptr)
        wr = a.send_wr(op, [a.sge(sptr, n, lmr.lkey)], rkey=rmr.rkey, remote=dptr)
    else:   # READ pulls the remote bytes into the local buffer
        lmr, rmr = M(a.pd, n, RW, address=dptr), M(b.pd, n, RW, address=sptr)
        wr = a.send_wr(op, [a.sge(dptr, n, lmr.lkey)], rkey=rmr.rkey, remote=sptr)
    a.qp.post_send(wr)
    assert [w.status for w in a.poll_all()] == [0]
    assert _bytes(dst) == want                      # in place, no track() anywhere
    assert a.node.fabric.trace.calls()[-1].result == {"data": True}
    assert a.node.space.allocations() == [] and b.node.space.allocations() == []


def test_send_into_an_untracked_bytearray(pair: Pair) -> None:
    a, b = pair
    src = bytearray(b"kv-cache page " * 20)
    dst = bytearray(len(src))
    sptr = ctypes.addressof(ctypes.c_char.from_buffer(src))
    dptr = ctypes.addressof(ctypes.c_char.from_buffer(dst))
    M, W = a.mods["pyverbs.mr"].MR, b.mods["pyverbs.wr"]
    smr, dmr = M(a.pd, len(src), LW, address=sptr), M(b.pd, len(dst), LW, address=dptr)
    b.qp.post_recv(W.RecvWR(wr_id=7, num_sge=1, sg=[b.sge(dptr, len(dst), dmr.lkey)]))
    a.qp.post_send(a.send_wr(OP.IBV_WR_SEND, [a.sge(sptr, len(src), smr.lkey)]))
    assert [w.status for w in a.poll_all()] == [0]
    assert [(w.wr_id, w.status) for w in b.poll_all()] == [(7, 0)]
    assert dst == src


def test_mr_read_and_write_reach_untracked_memory(pair: Pair) -> None:
    a, _ = pair
    arr = np.zeros(64, np.uint8)
    mr = a.mods["pyverbs.mr"].MR(a.pd, 64, LW, address=arr.ctypes.data)
    mr.write(b"abc", 3, 10)
    assert bytes(arr[10:13]) == b"abc" and mr.read(3, 10) == b"abc"


def test_unmapped_range_fails_with_efault_and_changes_nothing(pair: Pair,
                                                              pages: tuple[int, int]) -> None:
    # umem.c ib_umem_get: pin_user_pages fails on the unmapped page -> EFAULT (§5.2)
    a, _ = pair
    addr, size = pages
    assert _libc.munmap(addr + size, size) == 0           # a hole in the middle
    M = a.mods["pyverbs.mr"].MR
    nic = a.ctx.nic
    before = (nic.pinned_bytes, len(nic.live_mrs()))
    with pytest.raises(PyverbsRDMAError) as info:
        M(a.pd, 3 * size, LW, address=addr)
    assert info.value.error_code == errno.EFAULT
    assert (nic.pinned_bytes, len(nic.live_mrs())) == before
    with pytest.raises(PyverbsRDMAError):
        M(a.pd, 2, LW, address=addr + size - 1)           # one byte into the hole
    assert M(a.pd, size, LW, address=addr).length == size  # the mapped page registers
    assert M(a.pd, size, LW, address=addr + 2 * size).length == size


def test_writable_mr_of_read_only_mapping_fails_with_efault(pair: Pair,
                                                            pages: tuple[int, int]) -> None:
    # ib_access_writable(LOCAL_WRITE...) pins with FOLL_WRITE: a read-only page -> EFAULT
    a, _ = pair
    addr, size = pages
    assert _libc.mprotect(addr, size, mmap.PROT_READ) == 0
    M = a.mods["pyverbs.mr"].MR
    with pytest.raises(PyverbsRDMAError) as info:
        M(a.pd, size, LW, address=addr)
    assert info.value.error_code == errno.EFAULT
    ro = M(a.pd, size, int(A.IBV_ACCESS_REMOTE_READ), address=addr)   # read-only MR: fine
    assert ro.read(4, 0) == b"\x5a" * 4


def test_odp_does_not_pin_so_unmapped_memory_registers(pair: Pair,
                                                       pages: tuple[int, int]) -> None:
    # ON_DEMAND skips pinning at registration (umem_odp.c), so nothing is checked then
    a, _ = pair
    addr, size = pages
    assert _libc.munmap(addr, size) == 0
    mr = a.mods["pyverbs.mr"].MR(a.pd, size, LW | int(A.IBV_ACCESS_ON_DEMAND), address=addr)
    assert mr.length == size


def test_memory_unmapped_after_registration_is_refused_not_crashed(
        pair: Pair, pages: tuple[int, int]) -> None:
    a, b = pair
    addr, size = pages
    M = a.mods["pyverbs.mr"].MR
    lmr = M(a.pd, size, RW, address=addr)
    dst = np.zeros(size, np.uint8)
    rmr = M(b.pd, size, RW, address=dst.ctypes.data)
    assert _libc.munmap(addr, size) == 0
    with pytest.raises(UntrackedMemoryError, match="not mapped"):
        a.qp.post_send(a.send_wr(OP.IBV_WR_RDMA_WRITE, [a.sge(addr, 64, lmr.lkey)],
                                 rkey=rmr.rkey, remote=dst.ctypes.data))
    assert not dst.any()


def test_tracked_buffers_and_virtual_buffers_still_work(pair: Pair) -> None:
    a, b = pair
    src, dst = a.buffer(256, fill=3, name="src"), b.buffer(256, name="dst")
    smr, dmr = a.mr(src), b.mr(dst)
    a.qp.post_send(a.send_wr(OP.IBV_WR_RDMA_WRITE, [a.sge(src.ctypes.data, 256, smr.lkey)],
                             rkey=dmr.rkey, remote=dst.ctypes.data))
    assert [w.status for w in a.poll_all()] == [0] and np.array_equal(src, dst)
    assert a.node.fabric.live_mrs()[0].buffer in ("src", "dst")   # tracked names still show


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 4095), st.integers(1, 8192))
def test_maps_cache_answers_hits_without_rereading(off: int, n: int) -> None:
    arr = np.zeros(16384, np.uint8)
    maps = ProcessMaps()
    assert maps.is_mapped(int(arr.ctypes.data) + off, n)
    reads = maps.reads
    assert maps.is_mapped(int(arr.ctypes.data) + off, n)
    assert maps.reads == reads                           # a hit: no second parse
    assert not maps.is_mapped(1 << 62, n)                # never mapped: a miss re-reads
    assert maps.reads == reads + 1
