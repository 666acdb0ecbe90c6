"""Bytes of fake device memory, made only where something writes them.

A GPU KV cache is GiB to TiB of device memory the fake driver only records. Where a scenario
wants real bytes (``memory = "real"``), each device range gets a :class:`SparseBytes`: a dict
of 64 KiB pages created on the first write; a page never written reads as zeros, as fresh
``cudaMalloc`` memory is not (its content is undefined [DOC]), which is enough for transfers
that write a page before any read of it. A TiB-scale range costs only the pages touched.
"""

from __future__ import annotations

__all__ = ["PAGE", "SparseBytes"]

PAGE = 64 << 10


class SparseBytes:
    """``size`` bytes, backed page by page on first write."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._pages: dict[int, bytearray] = {}

    def _check(self, offset: int, nbytes: int) -> None:
        if offset < 0 or nbytes < 0 or offset + nbytes > self.size:
            raise IndexError(f"[{offset:#x}, {offset + nbytes:#x}) is outside the "
                             f"{self.size:#x} bytes of this range")

    def read(self, offset: int, nbytes: int) -> bytes:
        self._check(offset, nbytes)
        out = bytearray(nbytes)
        pos = 0
        while pos < nbytes:
            page, at = divmod(offset + pos, PAGE)
            n = min(PAGE - at, nbytes - pos)
            held = self._pages.get(page)
            if held is not None:
                out[pos:pos + n] = held[at:at + n]
            pos += n
        return bytes(out)

    def write(self, offset: int, data: bytes) -> None:
        self._check(offset, len(data))
        pos = 0
        while pos < len(data):
            page, at = divmod(offset + pos, PAGE)
            n = min(PAGE - at, len(data) - pos)
            held = self._pages.get(page)
            if held is None:
                held = self._pages[page] = bytearray(PAGE)
            held[at:at + n] = data[pos:pos + n]
            pos += n

    @property
    def resident(self) -> int:
        """The bytes the written pages take."""
        return len(self._pages) * PAGE
