"""``pyverbs.dmabuf.DmaBuf`` and ``pyverbs.mr.DmaBufMR``: dma-buf memory regions (§5.6).

``DmaBufMR(pd, length, access, dmabuf=None, offset=0, gpu=0, gtt=0)`` is pyverbs' signature
(rdma-core ``pyverbs/mr.pyx``): ``dmabuf`` is a ``DmaBuf`` or a dma-buf fd (one
``cuMemGetHandleForAddressRange`` exported); without one pyverbs allocates a DRM buffer of
``length + offset`` bytes. It calls ``ibv_reg_dmabuf_mr(pd, offset, length, iova=offset, fd,
access)``, and the MR's ``buf`` is the offset (``libibverbs/verbs.c``). The errno rules, in the
kernel's order, are :func:`reg_dmabuf_errno`'s. ``DmaBuf(size, gpu=0, gtt=0)`` opens
``/dev/dri/renderD<128+gpu>``: a node without that render node gives ENOENT, as
``dmabuf_alloc`` does, and rdma-core's tests skip on it.
"""

from __future__ import annotations

import errno
import mmap
import weakref
from typing import Any

from .. import dmabuf as dmabufs
from . import enums as V
from .cints import c_size_t, c_uint
from .errors import PyverbsError, PyverbsRDMAError, PyverbsUserError
from .node import PAGE_SIZE, U64, MrRecord, Nic, Node
from .pd import PD

__all__ = ["DmaBuf", "DmaBufMR", "reg_dmabuf", "reg_dmabuf_errno"]

_F = V.ibv_access_flags
# uverbs_std_types_mr.c UVERBS_METHOD_REG_DMABUF_MR: the access bits it accepts [DOC: kernel]
_DMABUF_ACCESS = int(_F.IBV_ACCESS_LOCAL_WRITE | _F.IBV_ACCESS_REMOTE_READ |
                     _F.IBV_ACCESS_REMOTE_WRITE | _F.IBV_ACCESS_REMOTE_ATOMIC |
                     _F.IBV_ACCESS_RELAXED_ORDERING)


class DmaBuf:
    """A DRM GEM buffer exported as a dma-buf (pyverbs/dmabuf.pyx), with real bytes."""

    def __init__(self, size: int, gpu: int = 0, gtt: int = 0, *, _node: Node) -> None:
        self._entry: dmabufs.DmaBufExport | None = None
        self.dmabuf_mrs: weakref.WeakSet[DmaBufMR] = weakref.WeakSet()
        size = c_size_t(size, "size")
        if not 0 <= gpu < _node.drm_render_nodes:
            # dmabuf_alloc: open("/dev/dri/renderD<128+gpu>") fails with ENOENT
            raise PyverbsRDMAError(f"Failed to allocate dmabuf of size {size} on gpu {gpu}",
                                   errno.ENOENT)
        nbytes = -(-max(size, 1) // PAGE_SIZE) * PAGE_SIZE   # GEM objects are whole pages [INF]
        self._entry = dmabufs.export(nbytes, 0, f"drm:renderD{128 + gpu}",
                                     f"GEM buffer of {nbytes} bytes", backing=True)
        self.size = nbytes
        self.map_offset = 0
        # the bytes, where traces and transfers find them (a real buffer of the node)
        self._space = _node.space
        view = dmabufs.mapping(self._entry.fd)
        if view is not None:
            self._space.track(view, name=f"dma-buf renderD{128 + gpu} fd {self._entry.fd}")

    @property
    def fd(self) -> int:
        return self._entry.fd if self._entry is not None else -1

    @property
    def drm_fd(self) -> int:
        """The fake maps the buffer through its own fd (``map_offset`` 0)."""
        return self.fd

    @property
    def handle(self) -> int:
        return self.fd

    def close(self) -> None:
        """Close the MRs over this buffer, then free it (pyverbs' close_weakrefs)."""
        if self._entry is None:
            return
        for mr in list(self.dmabuf_mrs):
            mr.close()
        if self._entry.host:
            self._space.forget(self._entry.host)
        dmabufs.release(self._entry.fd)
        self._entry = None

    def __del__(self) -> None:
        self.close()


def bind_dmabuf(node: Node) -> type[DmaBuf]:
    """``pyverbs.dmabuf.DmaBuf`` for one node (its render nodes)."""

    class BoundDmaBuf(DmaBuf):
        __qualname__ = __name__ = "DmaBuf"

        def __init__(self, size: int, gpu: int = 0, gtt: int = 0) -> None:
            super().__init__(size, gpu, gtt, _node=node)

    return BoundDmaBuf


def reg_dmabuf_errno(nic: Nic, offset: int, length: int, iova: int, fd: int,
                     access: int) -> int:
    """The errno of ``ibv_reg_dmabuf_mr`` (§5.6), 0 if it succeeds, in the order the checks
    run: the provider's op (rdma-core ``libibverbs/dummy_ops.c``: EOPNOTSUPP where the
    provider has none), uverbs (offset and iova in the same place of a page; only five
    access bits; ``ib_check_mr_access``), ``ib_umem_dmabuf_get`` (``umem_dmabuf.c``: an
    overflowing end, ``dma_buf_get``'s EBADF / EINVAL, a dma-buf shorter than offset +
    length, no pages; mapping it: ENOMEM where a GPU's dma-buf does not fit its BAR1,
    docs/cuda-runtime.md §14.5), then the device's MR table (``max_mr``)."""
    if not nic.profile.dmabuf_supported:
        return errno.EOPNOTSUPP
    if offset % PAGE_SIZE != iova % PAGE_SIZE or access & ~_DMABUF_ACCESS:
        return errno.EINVAL
    if access & int(_F.IBV_ACCESS_REMOTE_WRITE | _F.IBV_ACCESS_REMOTE_ATOMIC) and \
            not access & int(_F.IBV_ACCESS_LOCAL_WRITE):
        return errno.EINVAL
    if offset + length >= U64:
        return errno.EINVAL
    found = dmabufs.lookup(fd)
    if isinstance(found, int):
        return found
    if found.size < offset + length or length == 0:
        return errno.EINVAL
    code = _bar1(nic, found)[0]
    if code:
        return code
    if len(nic.live_mrs()) >= int(nic.attr["max_mr"]):
        return nic.profile.mr_exhausted_errno
    return 0


def _bar1(nic: Nic, export: dmabufs.DmaBufExport) -> tuple[int, int, int]:
    """(errno, device, BAR1 bytes) of mapping ``export`` for an MR of ``nic``: the node's
    GPU maps a dma-buf of its memory through BAR1 whole; other dma-bufs take none."""
    gpu = nic.node.gpu
    return (0, -1, 0) if gpu is None else gpu.dmabuf_check(export)


def reg_dmabuf(nic: Nic, pd_id: int, offset: int, length: int, iova: int, fd: int,
               access: int, owner: str = "pyverbs") -> MrRecord:
    """``ibv_reg_dmabuf_mr(pd, offset, length, iova, fd, access)``: an MR at ``iova`` in the
    NIC's table, or PyverbsRDMAError with the errno of :func:`reg_dmabuf_errno` (or an
    injected one). The MR holds its own reference: the caller may close ``fd`` after."""
    args = (offset, length, iova, fd, access)
    code = nic.node.fabric.check_fault("verbs.reg_mr", nic.face, "reg_dmabuf_mr", args,
                                       nic.node)
    code = code if code is not None else reg_dmabuf_errno(nic, offset, length, iova, fd,
                                                            access)
    if code:
        nic.node.fabric.trace.append(nic.face, "reg_dmabuf_mr", args, code, None, False)
        raise PyverbsRDMAError(f"Failed to register a dma-buf MR. length: {length}, "
                               f"access flags: {access}", code)
    key = nic.new_key()
    found = dmabufs.lookup(fd)
    export = found if isinstance(found, dmabufs.DmaBufExport) else None
    host = export.host + offset - iova if export is not None and export.host else 0
    _, gpu_device, gpu_bytes = _bar1(nic, export) if export is not None else (0, -1, 0)
    if gpu_bytes and nic.node.gpu is not None:
        nic.node.gpu.bar1_charge(gpu_device, gpu_bytes)    # given back in Nic.release
    rec = nic.adopt(MrRecord(nic, pd_id, iova, length, access, key, key, 0, owner,
                             gpu_device=gpu_device, gpu_bytes=gpu_bytes,
                             dmabuf_fd=fd, host_delta=host))
    nic.node.fabric.trace.append(nic.face, "reg_dmabuf_mr", args, 0, key, False)
    return rec


class DmaBufMR:
    """An MR over a dma-buf; ``buf`` is the offset, as libibverbs sets it."""

    def __init__(self, pd: PD, length: int, access: int, dmabuf: Any = None, offset: int = 0,
                 gpu: int = 0, gtt: int = 0) -> None:
        self._rec: MrRecord | None = None
        if not isinstance(pd, PD):
            raise PyverbsUserError(f"DmaBufMR needs a PD, got {type(pd).__name__}")
        length, access = c_size_t(length, "length"), c_uint(access, "access")
        offset = c_size_t(offset, "offset")
        nic = pd.nic
        self.is_dmabuf_internal = dmabuf is None
        if dmabuf is None:
            dmabuf = DmaBuf(length + offset, gpu, gtt, _node=nic.node)
        fd = dmabuf.fd if isinstance(dmabuf, DmaBuf) else int(dmabuf)
        self._rec = reg_dmabuf(nic, pd.pd_id, offset, length, offset, fd, access)
        self._nic, self._pd, self.dmabuf, self.offset = nic, pd, dmabuf, offset
        pd.add_ref(self)
        if isinstance(dmabuf, DmaBuf):
            dmabuf.dmabuf_mrs.add(self)

    @property
    def buf(self) -> int:
        return self._live().addr

    @property
    def lkey(self) -> int:
        return self._live().lkey

    @property
    def rkey(self) -> int:
        return self._live().rkey

    @property
    def length(self) -> int:
        return self._live().length

    @property
    def pd(self) -> PD:
        return self._pd

    def _live(self) -> MrRecord:
        if self._rec is None:
            raise PyverbsUserError("the dma-buf MR is closed")
        return self._rec

    def write(self, data: str | bytes, length: int, offset: int = 0) -> None:
        """Write through a mapping of the dma-buf (pyverbs maps ``dmabuf.drm_fd``)."""
        raw = data.encode() if isinstance(data, str) else bytes(data)
        with self._map(length, offset) as (view, at):
            view[at:at + length] = raw[:length]

    def read(self, length: int, offset: int) -> bytes:
        with self._map(length, offset) as (view, at):
            return bytes(view[at:at + length])

    def _map(self, length: int, offset: int) -> Any:
        at = offset + self.offset
        drm_fd = self.dmabuf.drm_fd     # an fd passed as an int has none, as in pyverbs
        try:
            view = mmap.mmap(drm_fd, at + length)
        except (OSError, ValueError) as exc:
            raise PyverbsError(f"Failed to map dma-buf of size {length}") from exc
        return _Mapped(view, at)

    def close(self) -> None:
        """``ibv_dereg_mr``; a second close does nothing."""
        rec, self._rec = self._rec, None
        if rec is None:
            return
        self._nic.release(rec)
        self._nic.node.fabric.trace.append(self._nic.face, "dereg_mr",
                                           (rec.addr, rec.length, rec.lkey), 0, None, False)
        if self.is_dmabuf_internal and isinstance(self.dmabuf, DmaBuf):
            self.dmabuf.close()

    def __enter__(self) -> DmaBufMR:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_rec", None) is not None:
            self.close()


class _Mapped:
    def __init__(self, view: mmap.mmap, at: int) -> None:
        self.view, self.at = view, at

    def __enter__(self) -> tuple[mmap.mmap, int]:
        return self.view, self.at

    def __exit__(self, *exc: object) -> None:
        self.view.close()
