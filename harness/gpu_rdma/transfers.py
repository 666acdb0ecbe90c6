"""The transfers step: pages of every buffer written from the prefill node's buffer into the
decode node's, one ``batch_transfer_sync_write`` per buffer through the prefill engine (as
SGLang's Mooncake KV manager sends a request's pages: ``batch_transfer_sync`` of page
addresses, docs/mooncake-verbs.md §8.4). kvreg makes these calls itself (they spend no call
budget); a batch that fails is pinned to its first page whose local or remote range lies in
no published buffer of its engine, the check the engine made.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .buffers import KvBuffer
from .selection import deciding_pages

__all__ = ["TransferFailure", "pair_pages", "segment_edges", "write_pages"]


@dataclass(frozen=True)
class TransferFailure:
    """A batch write of one buffer's pages that returned nonzero, and why."""

    seq: int
    buffer: str
    page: int
    side: str            # "prefill" (local range) or "decode" (remote range)
    addr: int
    nbytes: int
    code: int
    # the range is published, but an MR of its buffer was invalidated under it (its device
    # memory released and mapped again: docs/gpu-rdma.md §7)
    invalidated: bool = False


def segment_edges(engine: Any) -> list[int]:
    """Every start and end of a buffer the engine published."""
    st = engine.state
    if st is None:
        return []
    return [x for b in st.segment.buffers for x in (b.addr, b.addr + b.length)]


def _holds(engine: Any, addr: int, nbytes: int) -> bool:
    st = engine.state
    return st is not None and st.segment.holds(addr, nbytes)


def _usable(engine: Any, addr: int, nbytes: int) -> bool:
    st = engine.state
    return st is not None and st.segment.usable(addr, nbytes)


def pair_pages(src: KvBuffer, dst: KvBuffer, item: int,
               edges: list[int]) -> tuple[int, int, list[int]]:
    """(bytes, page length, the deciding pages) of one prefill -> decode buffer pair."""
    nbytes = min(src.nbytes, dst.nbytes)
    item = max(1, min(item, nbytes))
    pages = sorted(set(deciding_pages(src.ptr, nbytes, item, edges))
                   | set(deciding_pages(dst.ptr, nbytes, item, edges)))
    return nbytes, item, pages


def write_pages(src_engine: Any, dst_engine: Any, pairs: list[tuple[KvBuffer, KvBuffer, int]],
                next_seq: Callable[[], int]) -> tuple[list[TransferFailure], int, int]:
    """Write the deciding pages of each (prefill buffer, decode buffer, item) pair; returns
    the failures, the pages written and the pages there are."""
    target = dst_engine.state.segment.name
    edges = segment_edges(src_engine) + segment_edges(dst_engine)
    failures, moved, total = [], 0, 0
    for src, dst, item in pairs:
        nbytes, item, pages = pair_pages(src, dst, item, edges)
        total += -(-nbytes // item)
        lens = [min(item, nbytes - p * item) for p in pages]
        seq = next_seq()
        code = src_engine.batch_transfer_sync_write(
            target, [src.ptr + p * item for p in pages], [dst.ptr + p * item for p in pages],
            lens)
        if code == 0:
            moved += len(pages)
            continue
        failures.append(_culprit(src_engine, dst_engine, src, dst, item, pages, lens, seq,
                                 code))
    return failures, moved, total


def _culprit(src_engine: Any, dst_engine: Any, src: KvBuffer, dst: KvBuffer, item: int,
             pages: list[int], lens: list[int], seq: int, code: int) -> TransferFailure:
    for p, n in zip(pages, lens, strict=True):
        for side, engine, buf in (("prefill", src_engine, src), ("decode", dst_engine, dst)):
            at = buf.ptr + p * item
            if not _usable(engine, at, n):
                return TransferFailure(seq, buf.name, p, side, at, n, code,
                                       invalidated=_holds(engine, at, n))
    return TransferFailure(seq, src.name, pages[0], "prefill", src.ptr, lens[0], code)
