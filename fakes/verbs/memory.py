"""Byte movement for the fakes: real bytes between known real buffers, nothing otherwise.

A range is one of three kinds in a node's :class:`~kvreg.fakes.address_space.AddressSpace`:

- ``real``: inside one tracked real buffer (``space.track(obj)``, or a buffer pyverbs
  allocated for an MR). Transfers copy bytes with ``ctypes.memmove``.
- ``virtual``: a virtual address (bit 60 set). Registration-only: a transfer that touches
  it passes every protection check and completes, but **no byte moves** on either side;
  the trace marks it ``data=False``.
- ``untracked``: a real-looking address the fake was not told about. Registering it is
  allowed (the fake cannot tell whether it is mapped), but a transfer touching it raises
  :class:`UntrackedMemoryError`, because copying there could crash the process.
"""

from __future__ import annotations

import ctypes
from typing import Literal

from ..address_space import AddressSpace
from .errors import UntrackedMemoryError

__all__ = ["Kind", "classify", "copy", "read", "write"]

Kind = Literal["real", "virtual", "untracked"]


def classify(space: AddressSpace, ptr: int, nbytes: int) -> Kind:
    """Which kind of memory ``[ptr, ptr + nbytes)`` is (see the module docstring)."""
    if space.is_virtual(ptr):
        return "virtual"
    hit = space.owner(ptr)
    if hit is not None:
        alloc, _ = hit
        if alloc.kind == "real" and ptr + nbytes <= alloc.end:
            return "real"
    return "untracked"


def _require(kind: Kind, space: AddressSpace, ptr: int, nbytes: int, role: str) -> None:
    if kind == "untracked":
        raise UntrackedMemoryError(
            f"{role} range [{ptr:#x}, {ptr + nbytes:#x}) is not inside a buffer the fake "
            f"knows ({space.describe(ptr)}); call .track(buffer) on the fake node first, "
            "or use a virtual buffer for registration-only tests")


def copy(dst_space: AddressSpace, dst: int, src_space: AddressSpace, src: int,
         nbytes: int) -> bool:
    """Copy ``nbytes`` from src to dst; True if bytes moved, False if a side was virtual."""
    if nbytes <= 0:
        return True
    dk = classify(dst_space, dst, nbytes)
    sk = classify(src_space, src, nbytes)
    _require(dk, dst_space, dst, nbytes, "destination")
    _require(sk, src_space, src, nbytes, "source")
    if dk == "virtual" or sk == "virtual":
        return False
    ctypes.memmove(dst, src, nbytes)
    return True


def read(space: AddressSpace, ptr: int, nbytes: int) -> bytes | None:
    """The bytes at ``[ptr, ptr + nbytes)``, or None for virtual memory."""
    kind = classify(space, ptr, nbytes)
    _require(kind, space, ptr, nbytes, "source")
    if kind == "virtual":
        return None
    return ctypes.string_at(ptr, nbytes) if nbytes else b""


def write(space: AddressSpace, ptr: int, data: bytes | None) -> bool:
    """Write ``data`` at ``ptr``; False (nothing written) for virtual memory or no data."""
    if data is None:
        kind = classify(space, ptr, 1)
        _require(kind, space, ptr, 1, "destination")
        return False
    kind = classify(space, ptr, len(data))
    _require(kind, space, ptr, len(data), "destination")
    if kind == "virtual":
        return False
    if data:
        ctypes.memmove(ptr, data, len(data))
    return True
