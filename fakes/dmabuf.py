"""Fake dma-buf file descriptors: what an exporter (the CUDA driver, a DRM GPU) hands out and
an importer (``ibv_reg_dmabuf_mr``) resolves.

A dma-buf is a file; the kernel's ``dma_buf_get(fd)`` gives EBADF for a descriptor that is not
open and EINVAL for an open file that is not a dma-buf (drivers/dma-buf/dma-buf.c) [DOC:
kernel source]. So each fake dma-buf is a real descriptor of this process (a ``memfd``, which
``os.close`` closes as any fd) and this table knows it by the descriptor and the file's inode:
a number reused by another file after a close is not the dma-buf any more. The memfd is
sized only when the exporter wants bytes behind it (a small DRM buffer that pyverbs maps);
device memory exported by the CUDA driver has none.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import threading
from dataclasses import dataclass

__all__ = ["DmaBufExport", "export", "lookup", "mapping", "release"]


@dataclass(frozen=True)
class DmaBufExport:
    """One exported dma-buf: ``size`` bytes starting at ``base`` of the exporter's memory."""

    fd: int
    inode: int
    size: int
    base: int
    exporter: str      # "cuda:<device>" or "drm:renderD<n>"
    detail: str        # what the exporter exported, for messages
    host: int = 0      # where this process maps its bytes (0: it has none, device memory)


_LOCK = threading.Lock()
_TABLE: dict[int, DmaBufExport] = {}
_MAPS: dict[int, mmap.mmap] = {}     # fd -> the mapping of a dma-buf with bytes


def export(size: int, base: int, exporter: str, detail: str, *,
           backing: bool = False) -> DmaBufExport:
    """A new dma-buf fd for ``size`` bytes at ``base``; ``backing`` sizes the memfd so the
    fd can be mapped (real bytes, for small buffers only)."""
    fd = os.memfd_create(f"kvreg-dmabuf:{exporter}", os.MFD_CLOEXEC)
    host = 0
    view: mmap.mmap | None = None
    if backing:
        os.ftruncate(fd, size)
        view = mmap.mmap(fd, size)
        anchor = ctypes.c_char.from_buffer(view)
        host = ctypes.addressof(anchor)
        del anchor                       # the address stays valid while the map is open
    entry = DmaBufExport(fd, os.fstat(fd).st_ino, size, base, exporter, detail, host)
    with _LOCK:
        _TABLE[fd] = entry
        if view is not None:
            _MAPS[fd] = view
    return entry


def mapping(fd: int) -> mmap.mmap | None:
    """The process's mapping of a dma-buf with bytes (None for device memory)."""
    with _LOCK:
        return _MAPS.get(fd)


def lookup(fd: int) -> DmaBufExport | int:
    """The export behind ``fd``, or the errno ``dma_buf_get`` gives: EBADF when ``fd`` is
    not an open descriptor, EINVAL when it is one but no dma-buf."""
    if fd < 0:
        return errno.EBADF
    try:
        inode = os.fstat(fd).st_ino
    except OSError:
        return errno.EBADF
    with _LOCK:
        entry = _TABLE.get(fd)
    if entry is None or entry.inode != inode:
        return errno.EINVAL
    return entry


def release(fd: int) -> None:
    """Close a dma-buf's fd and forget it (an exporter's own cleanup)."""
    with _LOCK:
        entry = _TABLE.pop(fd, None)
        view = _MAPS.pop(fd, None)
    if view is not None:
        view.close()
    if entry is not None:
        try:
            if os.fstat(fd).st_ino == entry.inode:
                os.close(fd)
        except OSError:
            pass
