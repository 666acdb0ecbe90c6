"""The bytes a real-memory transfers step moves (a pool of ``memory = "real"``): a pattern in
every page prefill writes, the same bytes in decode's page after, as the mooncake target
checks its round trips. Only the deciding pages are touched, so the sparse device pages
(fakes/device_bytes.py) stay few. A page that arrives different is kvreg's fault (the engine
wrote it through registrations it checked), so it raises rather than judging the code.
"""

from __future__ import annotations

import random
from collections.abc import Collection
from typing import Any

from kvreg.fakes.verbs import memory

from .buffers import KvBuffer
from .transfers import pair_pages, segment_edges

__all__ = ["DataMismatch", "compare_pages", "fill_sources", "pattern"]

Pairs = list[tuple[KvBuffer, KvBuffer, int]]


class DataMismatch(RuntimeError):
    """A page decode received is not the page prefill sent (a fault of kvreg's fakes)."""


def pattern(buffer: str, page: int, nbytes: int) -> bytes:
    """The bytes of one source page: distinct per buffer and page."""
    return random.Random(f"{buffer}:{page}").randbytes(nbytes)


def _pages(src_engine: Any, dst_engine: Any, pairs: Pairs) -> list[tuple[KvBuffer, KvBuffer,
                                                                              int, int, int]]:
    edges = segment_edges(src_engine) + segment_edges(dst_engine)
    out = []
    for src, dst, item in pairs:
        nbytes, item, pages = pair_pages(src, dst, item, edges)
        out += [(src, dst, p * item, min(item, nbytes - p * item), p) for p in pages]
    return out


def fill_sources(src_engine: Any, dst_engine: Any, pairs: Pairs) -> None:
    """Write each source page's pattern where prefill's engine will read it."""
    space = src_engine.state.node.space
    for src, _, off, n, page in _pages(src_engine, dst_engine, pairs):
        memory.write(space, src.ptr + off, pattern(src.name, page, n))


def compare_pages(src_engine: Any, dst_engine: Any, pairs: Pairs,
                  failed: Collection[str]) -> int:
    """The pages compared; DataMismatch names the first that differs. Buffers whose write
    failed are left out (their verdict is the transfer's)."""
    space = dst_engine.state.node.space
    compared = 0
    for src, dst, off, n, page in _pages(src_engine, dst_engine, pairs):
        if src.name in failed or dst.name in failed:
            continue
        got = memory.read(space, dst.ptr + off, n)
        if got != pattern(src.name, page, n):
            raise DataMismatch(f"kvreg: decode's {dst.name} page {page} ({n} bytes at "
                               f"{dst.ptr + off:#x}) is not what prefill's {src.name} sent")
        compared += 1
    return compared
