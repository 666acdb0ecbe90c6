"""MRs over GPU memory: ibv_reg_mr through nvidia-peermem and ibv_reg_dmabuf_mr.

docs/mooncake-verbs.md §5.4-§5.6 and docs/cuda-runtime.md §14. A node sees a fake CUDA
driver's device memory once it is attached (``node.attach_gpu(fake.gpu_memory())``).
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from typing import Any

import pytest

from kvreg.fakes.cuda.fake_cuda import FakeCuda
from kvreg.fakes.cuda.profile import PROFILES, DeviceProfile
from kvreg.fakes.verbs import Fabric, PyverbsRDMAError, PyverbsUserError
from kvreg.fakes.verbs import enums as V
from kvreg.fakes.verbs.enums import ibv_access_flags as A

from ..helpers.gpu_memory import expandable_segment, ready_driver

MiB = 1 << 20
LW = int(A.IBV_ACCESS_LOCAL_WRITE)
RW = int(A.IBV_ACCESS_LOCAL_WRITE | A.IBV_ACCESS_REMOTE_WRITE | A.IBV_ACCESS_REMOTE_READ)


@dataclass
class Gpu:
    """One node with a NIC and an attached fake GPU, the driver ready for memory calls."""

    fabric: Fabric
    fake: FakeCuda
    drv: Any
    mods: dict[str, Any]
    pd: Any

    def mr(self, addr: int, length: int, access: int = RW) -> Any:
        return self.mods["pyverbs.mr"].MR(self.pd, length, access, address=addr)

    def dmabuf_mr(self, *args: Any, **kwargs: Any) -> Any:
        return self.mods["pyverbs.mr"].DmaBufMR(self.pd, *args, **kwargs)

    def alloc(self, size: int) -> int:
        err, ptr = self.drv.cuMemAlloc(size)
        assert int(err) == 0
        return int(ptr)


def _gpu(profile: str | DeviceProfile = "h200-r580", nic: str = "mlx5", *,
         attach: bool = True, memlock: int | None = None, **attrs: Any) -> Gpu:
    fake = FakeCuda(profile)
    drv = ready_driver(fake)
    fabric = Fabric(())
    node = fabric.add_node("n", memlock_limit=memlock)
    fabric.add_device("dev0", nic, node="n", **attrs)
    if attach:
        node.attach_gpu(fake.gpu_memory())
    mods = node.modules
    pd = mods["pyverbs.pd"].PD(mods["pyverbs.device"].Context(name="dev0"))
    return Gpu(fabric, fake, drv, mods, pd)


def _errno(fn: Any, *args: Any, **kwargs: Any) -> int:
    with pytest.raises(PyverbsRDMAError) as info:
        fn(*args, **kwargs)
    return info.value.error_code


# -- ibv_reg_mr on device memory (§5.5) ---------------------------------------------------

def test_peermem_registers_device_memory_and_an_interior_range() -> None:
    g = _gpu()
    p = g.alloc(64 * MiB)
    mr = g.mr(p + 4 * MiB, 8 * MiB)
    assert (mr.buf, mr.length) == (p + 4 * MiB, 8 * MiB)
    mr.close()
    assert g.fabric.live_mrs() == []


def test_without_peermem_device_memory_gives_efault() -> None:
    # docs/cuda-runtime.md §14.4: no nvidia-peermem -> "Bad address" (perftest #126) [OBS-ext]
    g = _gpu("no-peermem")
    assert _errno(g.mr, g.alloc(MiB), MiB) == errno.EFAULT
    # a node with no GPU attached: a device pointer is no host memory either -> EFAULT
    g2 = _gpu(attach=False)
    assert _errno(g2.mr, g2.alloc(MiB), MiB) == errno.EFAULT


def test_a_range_past_its_allocation_gives_efault() -> None:
    # §14.4: the peer client pins one allocation; its failure shows as EFAULT (gdrcopy #1)
    g = _gpu()
    p = g.alloc(4 * MiB)
    assert _errno(g.mr, p + 3 * MiB, 2 * MiB) == errno.EFAULT
    g.mr(p + 3 * MiB, MiB).close()


def test_vmm_memory_needs_the_gpudirect_flag() -> None:
    # §14.4: VMM memory without gpuDirectRDMACapable -> EFAULT [INF]; nv_peer_memory #121
    g = _gpu()
    plain, _ = expandable_segment(g.drv, mappings=1)
    capable, _ = expandable_segment(g.drv, mappings=1, rdma=True)
    assert _errno(g.mr, plain, 20 * MiB) == errno.EFAULT
    g.mr(capable, 20 * MiB).close()


def test_bar1_is_charged_in_gpu_pages_and_given_back() -> None:
    # §14.4: 64 KiB GPU pages [DOC]; a T4's 256 MiB BAR1, 32 MiB kept by the driver [UNC];
    # past it "Bad address" (ucx #8049, nv_peer_memory #101) [OBS-ext]
    g = _gpu("t4-small-bar1")
    p, q = g.alloc(160 * MiB), g.alloc(160 * MiB)
    one = g.mr(p + 100, 1)                      # one byte pins one whole 64 KiB page
    assert g.fake.driver.bar1_used == {0: 64 << 10}
    first = g.mr(p, 150 * MiB)
    assert _errno(g.mr, q, 150 * MiB) == errno.EFAULT
    first.close()
    one.close()
    assert g.fake.driver.bar1_used == {0: 0}
    g.mr(q, 150 * MiB).close()


def test_bar1_errno_is_a_profile_option() -> None:
    # §14.4 [UNC]: issue 28's ENOMEM, switchable
    g = _gpu(PROFILES["t4-small-bar1"].replace(bar1_exhausted_errno=errno.ENOMEM))
    assert _errno(g.mr, g.alloc(300 * MiB), 300 * MiB) == errno.ENOMEM


def test_gpu_mrs_are_not_charged_to_memlock() -> None:
    # §5.5: the peer client pins device pages, not the process's [INF]
    g = _gpu(memlock=64 << 10)
    mr = g.mr(g.alloc(512 * MiB), 512 * MiB)
    assert g.fabric.node("n").pinned_pages == 0
    mr.close()


def test_max_mr_applies_to_gpu_mrs() -> None:
    # §5.2: device out of MRs -> EAGAIN on mlx5
    g = _gpu(max_mr=2)
    p = g.alloc(8 * MiB)
    a, b = g.mr(p, MiB), g.mr(p + MiB, MiB)
    assert _errno(g.mr, p + 2 * MiB, MiB) == errno.EAGAIN
    a.close()
    b.close()


# -- ibv_reg_dmabuf_mr (§5.6) --------------------------------------------------------------

def _fd(g: Gpu, ptr: int, size: int) -> int:
    err, fd = g.drv.cuMemGetHandleForAddressRange(ptr, size, 1, 0)
    assert int(err) == 0
    return int(fd)


def test_dmabuf_mr_over_a_cuda_export() -> None:
    # pyverbs/mr.pyx: ibv_reg_dmabuf_mr(pd, offset, length, iova=offset, fd, access); the MR's
    # addr is the offset (libibverbs/verbs.c)
    g = _gpu()
    p = g.alloc(8 * MiB)
    fd = _fd(g, p, 8 * MiB)
    mr = g.dmabuf_mr(2 * MiB, RW, fd, offset=4096)
    assert (mr.buf, mr.length, mr.offset) == (4096, 2 * MiB, 4096)
    mr.close()
    mr.close()                                   # a second close does nothing, as in pyverbs
    assert g.fabric.live_mrs() == []
    os.close(fd)


def test_a_dmabuf_mr_maps_its_whole_export_through_bar1() -> None:
    # docs/cuda-runtime.md §14.5 [INF]: nv-dmabuf.c maps the whole dma-buf through BAR1 for
    # the importer (umem_dmabuf.c maps the attachment, then trims it); a failed map is
    # ENOMEM (dma_buf_map_attachment), checked after the dma-buf's size, before max_mr;
    # the charge is given back when the MR is closed. T4: 224 MiB of BAR1 usable.
    g = _gpu("t4-small-bar1", max_mr=1)
    p, q = g.alloc(128 * MiB), g.alloc(128 * MiB)
    fd_p, fd_q = _fd(g, p, 128 * MiB), _fd(g, q, 128 * MiB)
    mr = g.dmabuf_mr(4096, RW, fd_p)                 # one page of the MR, the whole fd mapped
    assert g.fake.driver.bar1_used == {0: 128 * MiB}
    assert _errno(g.dmabuf_mr, 128 * MiB, RW, fd_q, offset=4096) == errno.EINVAL
    assert _errno(g.dmabuf_mr, 4096, RW, fd_q) == errno.ENOMEM      # before max_mr's EAGAIN
    mr.close()
    assert g.fake.driver.bar1_used == {0: 0}
    g.dmabuf_mr(4096, RW, fd_q).close()
    os.close(fd_p)
    os.close(fd_q)


def test_dmabuf_mr_range_past_the_dmabuf_is_einval() -> None:
    # umem_dmabuf.c: dmabuf->size < offset + length -> EINVAL
    g = _gpu()
    p = g.alloc(8 * MiB)
    fd = _fd(g, p, 4 * MiB)
    assert _errno(g.dmabuf_mr, 4 * MiB, RW, fd, offset=4096) == errno.EINVAL
    g.dmabuf_mr(4 * MiB - 4096, RW, fd, offset=4096).close()
    os.close(fd)


def test_dmabuf_fd_that_is_closed_or_no_dmabuf() -> None:
    # dma_buf_get: EBADF for a descriptor not open, EINVAL for an open non-dma-buf file
    g = _gpu()
    fd = _fd(g, g.alloc(MiB), MiB)
    os.close(fd)
    assert _errno(g.dmabuf_mr, 4096, LW, 987654) == errno.EBADF
    other = os.open(os.devnull, os.O_RDONLY)
    try:
        assert _errno(g.dmabuf_mr, 4096, LW, other) == errno.EINVAL
    finally:
        os.close(other)


@pytest.mark.parametrize("access", [
    int(A.IBV_ACCESS_REMOTE_WRITE),                          # ib_check_mr_access
    int(A.IBV_ACCESS_REMOTE_ATOMIC),
    int(A.IBV_ACCESS_LOCAL_WRITE | A.IBV_ACCESS_ON_DEMAND),  # not among the five bits
])
def test_dmabuf_mr_access_rules(access: int) -> None:
    g = _gpu()
    fd = _fd(g, g.alloc(MiB), MiB)
    assert _errno(g.dmabuf_mr, 4096, access, fd) == errno.EINVAL
    os.close(fd)


def test_dmabuf_mr_length_zero_is_einval_and_rxe_has_no_dmabuf() -> None:
    g = _gpu()
    fd = _fd(g, g.alloc(MiB), MiB)
    assert _errno(g.dmabuf_mr, 0, LW, fd) == errno.EINVAL
    # rxe implements no reg_dmabuf_mr: libibverbs/dummy_ops.c -> EOPNOTSUPP
    rxe = _gpu(nic="rxe")
    fd2 = _fd(rxe, rxe.alloc(MiB), MiB)
    assert _errno(rxe.dmabuf_mr, 4096, LW, fd2) == errno.EOPNOTSUPP
    os.close(fd)
    os.close(fd2)


def test_registering_the_mapping_cumemgetaddressrange_gave_fails_like_mooncake_2511() -> None:
    # docs/cuda-runtime.md §14.2: a KV cache tensor over many 20 MiB expandable-segment
    # mappings; cuMemGetAddressRange returns one mapping, so a dma-buf of that range cannot
    # hold the tensor: ibv_reg_dmabuf_mr -> EINVAL (Mooncake #2511) [OBS-ext]
    g = _gpu()
    va, _ = expandable_segment(g.drv, mappings=4, rdma=True)
    tensor, nbytes = va + 2 * MiB, 70 * MiB
    # broken: the allocation's range as cuMemGetAddressRange gives it
    _, base, size = g.drv.cuMemGetAddressRange(tensor)
    fd = _fd(g, int(base), size)
    assert _errno(g.dmabuf_mr, nbytes, RW, fd, offset=tensor - int(base)) == errno.EINVAL
    os.close(fd)
    # correct (as Mooncake #3538 does): export the tensor's own page-aligned range
    fd = _fd(g, tensor, nbytes)
    g.dmabuf_mr(nbytes, RW, fd).close()
    os.close(fd)


# -- pyverbs.dmabuf.DmaBuf (DRM buffers) ----------------------------------------------------

def test_dmabuf_without_a_render_node_is_enoent() -> None:
    # dmabuf_alloc opens /dev/dri/renderD128: ENOENT, on which rdma-core's tests skip
    # (tests/test_mr.py check_dmabuf_support)
    g = _gpu()
    DmaBuf = g.mods["pyverbs.dmabuf"].DmaBuf
    assert _errno(DmaBuf, 4096) == errno.ENOENT
    assert _errno(g.dmabuf_mr, 4096, LW) == errno.ENOENT       # an internal DmaBuf


def test_drm_dmabuf_mr_writes_and_reads_its_bytes() -> None:
    g = _gpu()
    g.fabric.node("n").drm_render_nodes = 1
    with g.dmabuf_mr(8192, RW, offset=4096) as mr:
        mr.write("kv cache", 8)
        assert mr.read(2, 3) == b"ca"
        assert mr.buf == 4096
    buf = g.mods["pyverbs.dmabuf"].DmaBuf(8192)
    mr = g.dmabuf_mr(4096, RW, buf)
    buf.close()                                   # closes the MRs over it first
    assert g.fabric.live_mrs() == []
    with pytest.raises(PyverbsUserError):
        mr.lkey  # noqa: B018


def test_rdma_write_into_a_drm_dmabuf_mr_lands_in_its_bytes(pair: Any) -> None:
    # §5.6: an RDMA WRITE to a dma-buf MR's iova reaches the dma-buf's bytes (rdma-core
    # tests/test_mr.py DmaBufTestCase.test_dmabuf_rdma_traffic runs the same over a DRM buffer)
    a, b = pair
    b.node.drm_render_nodes = 1
    src = a.buffer(4096, fill=5)
    smr = a.mr(src)
    dmr = b.mods["pyverbs.mr"].DmaBufMR(b.pd, 8192, RW, offset=4096)
    a.qp.post_send(a.send_wr(int(V.ibv_wr_opcode.IBV_WR_RDMA_WRITE),
                             [a.sge(src.ctypes.data, 1000, smr.lkey)],
                             rkey=dmr.rkey, remote=dmr.buf + 16))
    (wc,) = a.poll_all()
    assert wc.status == 0
    assert dmr.read(1000, 16) == src[:1000].tobytes()
    assert dmr.read(16, 0) == bytes(16)
    dmr.close()


def _saver_mr(side: Any) -> tuple[Any, Any, list[list[int]]]:
    """A 2 MiB torch_memory_saver allocation on ``side``'s attached GPU and an MR over it."""
    from kvreg.harness.gpu_rdma.layout import saver_create

    fake = FakeCuda("h200-r580")
    drv = ready_driver(fake)
    side.node.attach_gpu(fake.gpu_memory())
    handle = saver_create(drv, 2 * MiB)
    va = int(drv.cuMemAddressReserve(2 * MiB, 0, 0, 0)[1])
    assert int(drv.cuMemMap(va, 2 * MiB, 0, handle, 0)[0]) == 0
    mr = side.mods["pyverbs.mr"].MR(side.pd, 2 * MiB, RW, address=va)
    return drv, mr, [[va, 2 * MiB, int(handle)]]


@pytest.mark.parametrize("where", ["remote", "local"])
def test_an_mr_over_released_and_remapped_device_memory_is_refused(pair: Any,
                                                                   where: str) -> None:
    # docs/gpu-rdma.md §7: the memory saver's pause frees the memory the MR pinned
    # (nvidia-peermem's free callback invalidates it); new memory mapped at the same address
    # is not reached through the old keys: the responder refuses the rkey
    # (IBV_WC_REM_ACCESS_ERR), the requester the lkey (IBV_WC_LOC_PROT_ERR)
    from kvreg.harness.gpu_rdma.layout import saver_pause, saver_resume

    a, b = pair
    host = a.buffer(4096, fill=7) if where == "remote" else b.buffer(4096)
    drv, gmr, saver = _saver_mr(b if where == "remote" else a)
    saver_pause(drv, saver)
    saver_resume(drv, saver)
    if where == "remote":
        hmr = a.mr(host)
        sge, rkey, remote = a.sge(host.ctypes.data, 1000, hmr.lkey), gmr.rkey, gmr.buf
    else:
        hmr = b.mr(host)
        sge, rkey, remote = a.sge(gmr.buf, 1000, gmr.lkey), hmr.rkey, host.ctypes.data
    a.qp.post_send(a.send_wr(int(V.ibv_wr_opcode.IBV_WR_RDMA_WRITE), [sge], rkey=rkey,
                             remote=remote))
    (wc,) = a.poll_all()
    want = V.ibv_wc_status.IBV_WC_REM_ACCESS_ERR if where == "remote" else \
        V.ibv_wc_status.IBV_WC_LOC_PROT_ERR
    assert wc.status == int(want)
    gmr.close()                          # ibv_dereg_mr of the dead MR succeeds
