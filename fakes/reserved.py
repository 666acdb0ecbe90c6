"""Reserved host memory handed out as real ``torch.Tensor``s: any size, no RAM until touched.

A pool buffer must be a real CPU tensor (pool code calls whatever torch offers: ``stride(d)``,
``transpose``, ``narrow``, ``untyped_storage()``…) at a real process address, while a 4 TiB
pool costs no RAM. The mechanism, per reservation:

- a ``memfd`` of the buffer's size (sparse: shmem allocates a page only when it is touched,
  so ``fstat().st_blocks`` is exactly what the buffer costs in RAM);
- a ``PROT_NONE`` private reservation of the size plus the alignment plus a guard page, which
  costs nothing and counts in no limit, and the memfd mapped ``MAP_SHARED | MAP_FIXED |
  MAP_NORESERVE`` at the aligned address inside it. The rest of the reservation stays
  ``PROT_NONE``, so a range that runs past the buffer's (page-rounded) end is not readable
  memory in ``/proc/self/maps``: "range not fully mapped" answers truly.
  A shared mapping is used, not a private anonymous one, because ``RLIMIT_DATA`` (the worker's
  memory limit, kvreg.harness.run.limits) counts the whole size of a private writable mapping
  even with ``MAP_NORESERVE``: a 4 TiB ``MAP_PRIVATE`` buffer fails under a 2 GiB limit;
- the tensor is ``torch.frombuffer`` over a ctypes array at that address, viewed with the
  requested dtype and shape; it owns the mapping, which is unmapped when the last tensor (or
  view, or storage) over it is gone;
- with an ``offset``, the tensor begins that many bytes past the aligned address, as torch's
  own large tensors do (``posix_memalign(64)`` over glibc's mmapped chunk puts them 64 bytes
  into a page: scenarios/FORMAT.md, ``base_offset``); the mapping begins at the page holding
  the first byte, and the pages below it stay ``PROT_NONE``.

:func:`release` frees a reservation's RAM at once (the pages read as zeros afterwards) and
unmaps it as soon as nothing refers to it, so many scenarios' pools fit one address space;
:func:`live` lists what is still mapped. A released buffer that only garbage in a reference
cycle holds (a world kept by an exception's traceback) is unmapped by the next garbage
collection, and when such mappings pass :data:`PENDING_LIMIT` a new reservation collects first:
the address space they hold is shared with every other mapping of the process (the code under
test's, torch's), whose ``mmap`` would fail with ``ENOMEM`` before ours retries. Linux only
(memfd, ``/proc``); elsewhere :func:`reserve_tensor` raises :class:`OSError` naming what is missing.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import gc
import math
import os
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .dtypes import as_dtype

if TYPE_CHECKING:
    import torch

__all__ = ["DEFAULT_ALIGN", "PENDING_LIMIT", "Reservation", "live", "release", "reservation_of",
           "reserve", "reserve_tensor"]

DEFAULT_ALIGN = 2 << 20         # like a 2 MiB hugepage-aligned mmap
PAGE = 4096
# released mappings still waiting for the collector, in bytes of address space, before a new
# reservation runs it: a few 4 TiB pools of the 128 TiB an x86-64 process has
PENDING_LIMIT = 16 << 40

_PROT_NONE, _PROT_RW = 0, 3
_MAP_SHARED, _MAP_PRIVATE, _MAP_FIXED, _MAP_ANONYMOUS, _MAP_NORESERVE = \
    0x01, 0x02, 0x10, 0x20, 0x4000
_FALLOC_FL_KEEP_SIZE, _FALLOC_FL_PUNCH_HOLE = 0x01, 0x02
_MAP_FAILED = ctypes.c_void_p(-1).value


class _Libc:
    """mmap / munmap / fallocate from libc, typed once."""

    def __init__(self) -> None:
        lib = ctypes.CDLL(None, use_errno=True)
        self.mmap = lib.mmap
        self.mmap.restype = ctypes.c_void_p
        self.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.c_long]
        self.munmap = lib.munmap
        self.munmap.restype = ctypes.c_int
        self.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
        self.fallocate = lib.fallocate
        self.fallocate.restype = ctypes.c_int
        self.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]


_LIBC: _Libc | None = None
# base -> reservation still mapped. No lock: a finalizer (``__del__`` run by the collector in
# the middle of any allocation, also while a lock is held) removes entries, so the table is
# only changed and copied by single dict operations, which the GIL makes atomic.
_LIVE: dict[int, weakref.ref[Reservation]] = {}
_PENDING = [0]   # bytes of span of the released mappings still mapped (awaiting collection)


def _libc() -> _Libc:
    global _LIBC
    if _LIBC is None:
        if not hasattr(os, "memfd_create"):
            raise OSError(errno.ENOSYS, "reserved tensors need Linux (os.memfd_create)")
        _LIBC = _Libc()
    return _LIBC


class Reservation:
    """One mapping behind a reserved tensor: where it is, what it costs, how it ends."""

    def __init__(self, nbytes: int, align: int, name: str, offset: int = 0) -> None:
        libc = _libc()
        _collect_released()
        self.nbytes = nbytes
        self.name = name
        lead, inpage = offset & ~(PAGE - 1), offset & (PAGE - 1)
        # what an mmap would map: the pages holding [base, base + nbytes)
        self.mapped = max(PAGE, (inpage + nbytes + PAGE - 1) & ~(PAGE - 1))
        self.span = lead + self.mapped + align + PAGE                # guard pages on both sides
        self.released = False
        fd = os.memfd_create(f"kvreg:{name}"[:240] or "kvreg", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, self.mapped)
            region = _reserve(libc, self.span)
            if region in (None, _MAP_FAILED):
                raise _no_room(nbytes, ctypes.get_errno())
            # a guard page below the buffer too: an aligned region would abut the mapping below
            start = ((region + PAGE + align - 1) & ~(align - 1)) + lead
            got = libc.mmap(start, self.mapped, _PROT_RW,
                            _MAP_SHARED | _MAP_FIXED | _MAP_NORESERVE, fd, 0)
            if got != start:
                err = ctypes.get_errno()
                libc.munmap(region, self.span)
                raise _no_room(nbytes, err)
        except BaseException:
            os.close(fd)
            raise
        self.fd: int | None = fd
        self.region: int = int(region)
        self.start: int = int(start)          # the first mapped page
        self.base: int = int(start) + inpage  # the tensor's first byte
        _LIVE[self.base] = weakref.ref(self)

    @property
    def end(self) -> int:
        return self.base + self.nbytes

    def resident_bytes(self) -> int:
        """RAM the buffer's touched pages take now (0 for a buffer nobody wrote)."""
        fd = self.fd
        return 0 if fd is None else int(os.fstat(fd).st_blocks) * 512

    def free_pages(self) -> None:
        """Give the touched pages back to the system; the buffer then reads as zeros."""
        fd = self.fd
        if fd is not None and self.resident_bytes():
            _libc().fallocate(fd, _FALLOC_FL_PUNCH_HOLE | _FALLOC_FL_KEEP_SIZE, 0, self.mapped)

    def _unmap(self) -> None:
        fd, self.fd = self.fd, None
        if fd is None:
            return
        _LIVE.pop(self.base, None)
        if self.released:
            _PENDING[0] -= self.span
        _libc().munmap(self.region, self.span)
        os.close(fd)

    def __del__(self) -> None:      # the last tensor over the mapping is gone
        with contextlib.suppress(Exception):  # at shutdown the process unmaps it anyway
            self._unmap()

    def __repr__(self) -> str:
        state = "released" if self.released else "live"
        return (f"Reservation({self.name!r}, base={self.base:#x}, nbytes={self.nbytes}, "
                f"{state})")


def _collect_released() -> None:
    """Run the collector when released mappings awaiting it hold more than PENDING_LIMIT
    (kept as a running sum: summing every live mapping on each reservation cost a scenario
    of many buffers more than its mmaps)."""
    if _PENDING[0] > PENDING_LIMIT:
        gc.collect()


def _reserve(libc: _Libc, span: int) -> int | None:
    """A PROT_NONE reservation of ``span`` bytes; when the address space is full, once more
    after a garbage collection (unreleased buffers of fakes that are garbage in a reference
    cycle are unmapped by it)."""
    flags = _MAP_PRIVATE | _MAP_ANONYMOUS | _MAP_NORESERVE
    region: int | None = libc.mmap(None, span, _PROT_NONE, flags, -1, 0)
    if region in (None, _MAP_FAILED) and ctypes.get_errno() == errno.ENOMEM:
        gc.collect()
        region = libc.mmap(None, span, _PROT_NONE, flags, -1, 0)
    return region


def _no_room(nbytes: int, err: int) -> MemoryError:
    return MemoryError(
        f"cannot reserve {nbytes} bytes of address space for a buffer: mmap failed with "
        f"{errno.errorcode.get(err, str(err))} ({os.strerror(err)}); the process's address "
        f"space (128 TiB on x86-64) is shared by every buffer still alive")


def _torch_dtype(dtype: Any) -> Any:
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    found = getattr(torch, as_dtype(dtype).name, None)
    if not isinstance(found, torch.dtype):
        raise ValueError(f"this torch ({torch.__version__}) has no dtype {as_dtype(dtype)}")
    return found


def reserve_tensor(nbytes: int | None = None, *, dtype: Any = "uint8",
                   shape: Sequence[int] | None = None, name: str = "",
                   align: int = DEFAULT_ALIGN, offset: int = 0) -> torch.Tensor:
    """A contiguous CPU ``torch.Tensor`` over fresh reserved memory; no RAM until touched.

    Give ``nbytes`` (a flat tensor of ``nbytes // itemsize`` elements), ``shape``, or both
    (then they must agree). ``dtype`` is a torch dtype or a name (``"bfloat16"``). The base is
    ``offset`` bytes (default 0, a multiple of the itemsize below ``align``) past an address
    aligned to ``align`` (a power of two, at least a page). :func:`reservation_of` finds the
    mapping again from the tensor or any view of it; :func:`release` ends it. An empty tensor's
    ``data_ptr()`` is 0, as torch gives it (its reservation is :func:`reserve`'s to keep).

    Raises TypeError / ValueError for a bad argument (nothing is mapped then), ValueError where
    torch itself refuses the size (more than 2**63 - 1 bytes or elements), MemoryError where
    the address space has no room.
    """
    return reserve(nbytes, dtype=dtype, shape=shape, name=name, align=align, offset=offset)[0]


def reserve(nbytes: int | None = None, *, dtype: Any = "uint8",
            shape: Sequence[int] | None = None, name: str = "",
            align: int = DEFAULT_ALIGN,
            offset: int = 0) -> tuple[torch.Tensor, Reservation]:
    """:func:`reserve_tensor`, with the tensor's :class:`Reservation` (same arguments)."""
    dims = None if shape is None else _dims(shape)
    tdtype = _torch_dtype(dtype)
    itemsize = tdtype.itemsize
    if nbytes is not None and (not isinstance(nbytes, int) or isinstance(nbytes, bool)):
        raise TypeError(f"nbytes must be an int, got {type(nbytes).__name__}")
    if nbytes is not None and nbytes < 0:
        raise ValueError(f"nbytes must be >= 0, got {nbytes}")
    if dims is None:
        if nbytes is None:
            raise TypeError("reserve_tensor() needs nbytes or shape")
        if nbytes % itemsize:
            raise ValueError(f"nbytes {nbytes} is not a multiple of the itemsize {itemsize} "
                             f"of {tdtype}")
        dims = (nbytes // itemsize,)
    size = math.prod(dims) * itemsize
    if nbytes is not None and nbytes != size:
        raise ValueError(f"shape {dims} of {tdtype} is {size} bytes, not nbytes={nbytes}")
    if not isinstance(align, int) or align < PAGE or align & (align - 1):
        raise ValueError(f"align must be a power of two of at least {PAGE}, got {align!r}")
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0 or \
            offset >= align or offset % itemsize:
        raise ValueError(f"offset must be an int in [0, align={align}) and a multiple of the "
                         f"itemsize {itemsize} of {tdtype}, got {offset!r}")
    limit = (1 << 63) - 1
    if size > limit or math.prod(dims) > limit:
        raise ValueError(f"a tensor of shape {dims} and dtype {tdtype} is {size} bytes: torch "
                         f"refuses tensors of more than 2**63 - 1 bytes or elements (int64 "
                         f"sizes)")
    res = Reservation(size, align, name or "reserved", offset)
    return _wrap(res, dims, tdtype), res


def _dims(shape: Sequence[int]) -> tuple[int, ...]:
    dims = (shape,) if isinstance(shape, int) else tuple(shape)
    if any(not isinstance(d, int) or isinstance(d, bool) for d in dims):
        raise TypeError(f"shape must hold ints, got {shape!r}")
    if any(d < 0 for d in dims):
        raise ValueError(f"negative dimension in shape {dims}")
    return dims


def _wrap(res: Reservation, dims: tuple[int, ...], tdtype: Any) -> torch.Tensor:
    import torch

    raw = (ctypes.c_uint8 * max(res.nbytes, 1)).from_address(res.base)
    raw._kvreg_reservation = res           # type: ignore[attr-defined]  # the tensor owns it
    flat = torch.frombuffer(raw, dtype=torch.uint8)[:res.nbytes]
    return flat.view(tdtype).view(dims)


def reservation_of(tensor: Any) -> Reservation | None:
    """The live reservation holding ``tensor``'s first byte (any view of it), or None."""
    try:
        ptr = int(tensor.data_ptr())
    except (AttributeError, TypeError, RuntimeError):
        return None
    for ref in _LIVE.copy().values():
        res = ref()
        if res is not None and res.start <= ptr < res.start + res.mapped:
            return res
    return None


def release(tensor_or_reservation: Any) -> bool:
    """End a reservation: its RAM is freed now and the mapping goes when nothing refers to it.

    Tensors still held elsewhere (a global of the code under test) stay valid and read as
    zeros; the address range is unmapped once the last of them is gone. Returns whether a
    live reservation was found. Calling it twice is harmless.
    """
    res = tensor_or_reservation if isinstance(tensor_or_reservation, Reservation) else \
        reservation_of(tensor_or_reservation)
    if res is None or res.fd is None:
        return False
    if not res.released:
        _PENDING[0] += res.span
    res.released = True
    res.free_pages()
    return True


def live() -> list[Reservation]:
    """Reservations still mapped in this process (released ones that something still holds)."""
    refs = _LIVE.copy().values()
    return [r for r in (ref() for ref in refs) if r is not None and r.fd is not None]
