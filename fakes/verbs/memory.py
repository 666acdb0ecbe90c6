"""Byte movement for the fakes: real bytes where the process has them, nothing otherwise.

A range is one of four kinds in a node's :class:`~kvreg.fakes.address_space.AddressSpace`:

- ``real``: inside one tracked real buffer (``space.track(obj)``, or a buffer pyverbs
  allocated for an MR). Transfers copy bytes with ``ctypes.memmove``.
- ``process``: ordinary process memory nobody tracked (a numpy array, a ``bytearray``, a
  torch CPU tensor, by address) that ``/proc/self/maps`` shows mapped (:mod:`kvreg.fakes.procmaps`).
  Real verbs and the real store move the bytes of any registered range, so the fake does
  too, in place, with no extra call (docs/mooncake-verbs.md §5.2: pinning needs only a mapping).
- ``virtual``: a virtual address (bit 60 set). Registration-only: a transfer that touches
  it passes every protection check and completes, but **no byte moves** on either side;
  the trace marks it ``data=False``.
- ``device``: fake device memory with bytes (``space.add_device``, a sparse page store):
  transfers read and write its pages (fakes/device_bytes.py).
- ``untracked``: an address that is not mapped in this process (or, where ``/proc`` is
  missing, not tracked). Registering it fails as pinning fails (EFAULT); a transfer that
  touches it (memory unmapped after registration) raises :class:`UntrackedMemoryError`
  instead of crashing the process.
"""

from __future__ import annotations

import ctypes
from typing import Literal

from ..address_space import AddressSpace
from ..procmaps import is_mapped
from .errors import UntrackedMemoryError

__all__ = ["Kind", "classify", "copy", "read", "write"]

Kind = Literal["real", "process", "device", "virtual", "untracked"]


def classify(space: AddressSpace, ptr: int, nbytes: int, *, write: bool = False,
             fresh: bool = False) -> Kind:
    """Which kind of memory ``[ptr, ptr + nbytes)`` is (see the module docstring).

    ``write``: the range must be writable to count as ``process`` memory; ``fresh``: read
    the process's mappings now rather than trust the cache (registration does).
    """
    if space.device_bytes(ptr, nbytes) is not None:
        return "device"
    if space.is_virtual(ptr):
        return "virtual"
    hit = space.owner(ptr)
    if hit is not None:
        alloc, _ = hit
        if alloc.kind == "real" and ptr + nbytes <= alloc.end:
            return "real"
    if is_mapped(ptr, nbytes, write=write, fresh=fresh):
        return "process"
    return "untracked"


def require(kind: Kind, space: AddressSpace, ptr: int, nbytes: int, role: str) -> None:
    """UntrackedMemoryError for a range the process cannot read or write."""
    if kind == "untracked":
        raise UntrackedMemoryError(
            f"{role} range [{ptr:#x}, {ptr + nbytes:#x}) ({space.describe(ptr)}) is not "
            "mapped (or not writable) in this process: its memory went away after it was "
            "registered; a real NIC would reach the pinned pages, the fake cannot")


def copy(dst_space: AddressSpace, dst: int, src_space: AddressSpace, src: int,
         nbytes: int) -> bool:
    """Copy ``nbytes`` from src to dst; True if bytes moved, False if a side was virtual."""
    if nbytes <= 0:
        return True
    dk = classify(dst_space, dst, nbytes, write=True)
    sk = classify(src_space, src, nbytes)
    require(dk, dst_space, dst, nbytes, "destination")
    require(sk, src_space, src, nbytes, "source")
    if dk == "virtual" or sk == "virtual":
        return False
    if dk == "device" or sk == "device":
        _put(dst_space, dst, _get(src_space, src, nbytes, sk), dk)
    else:
        ctypes.memmove(dst, src, nbytes)
    return True


def _get(space: AddressSpace, ptr: int, nbytes: int, kind: Kind) -> bytes:
    if kind == "device":
        store, off = space.device_bytes(ptr, nbytes)  # type: ignore[misc]
        return bytes(store.read(off, nbytes))
    return ctypes.string_at(ptr, nbytes)


def _put(space: AddressSpace, ptr: int, data: bytes, kind: Kind) -> None:
    if kind == "device":
        store, off = space.device_bytes(ptr, len(data))  # type: ignore[misc]
        store.write(off, data)
    elif data:
        ctypes.memmove(ptr, data, len(data))


def read(space: AddressSpace, ptr: int, nbytes: int) -> bytes | None:
    """The bytes at ``[ptr, ptr + nbytes)``, or None for virtual memory."""
    if nbytes <= 0:
        return b""
    kind = classify(space, ptr, nbytes)
    require(kind, space, ptr, nbytes, "source")
    if kind == "virtual":
        return None
    return _get(space, ptr, nbytes, kind)


def write(space: AddressSpace, ptr: int, data: bytes | None) -> bool:
    """Write ``data`` at ``ptr``; False (nothing written) for virtual memory or no data."""
    n = max(len(data), 1) if data is not None else 1
    kind = classify(space, ptr, n, write=True)
    require(kind, space, ptr, n, "destination")
    if kind == "virtual" or data is None:
        return False
    _put(space, ptr, data, kind)
    return True
