"""The transfers step over NIXL: each agent loads the other's metadata (vLLM's handshake:
``get_agent_metadata`` / ``add_remote_agent``), then the deciding pages of every buffer are
written from the prefill agent into the decode agent's buffer: ``prep_xfer_dlist`` of the
local pages and of the remote ones, ``make_prepped_xfer("WRITE", ...)``, ``transfer`` and
``check_xfer_state`` until it is done, as vLLM's NixlConnector moves blocks (there as READ by
decode). kvreg makes these calls itself (they spend no call budget). A failure is pinned to
the first page whose range no registration of its side covers, by NIXL's own lookup.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kvreg.fakes.nixl import NixlError, nixl_mem_t, nixl_status_t
from kvreg.fakes.nixl.sections import covered

from .buffers import KvBuffer
from .selection import deciding_pages
from .transfers import TransferFailure

__all__ = ["MetadataFailure", "exchange_metadata", "registration_edges", "write_pages"]

LOCAL = "NIXL_INIT_AGENT"


@dataclass(frozen=True)
class MetadataFailure:
    """An agent's metadata that another agent could not load."""

    seq: int
    loader: str
    owner: str
    status: int


def _status(exc: BaseException) -> int:
    return int(getattr(exc, "status", -8))


def exchange_metadata(agents: list[Any], next_seq: Callable[[], int]
                      ) -> list[MetadataFailure]:
    """Each agent loads every other's metadata; the loads that raised."""
    out = []
    for loader in agents:
        for owner in agents:
            if owner is loader:
                continue
            seq = next_seq()
            try:
                loader.add_remote_agent(owner.get_agent_metadata())
            except NixlError as exc:
                out.append(MetadataFailure(seq, loader.name, owner.name, _status(exc)))
    return out


def registration_edges(agent: Any) -> list[int]:
    """Every start and end of a range the agent holds registered."""
    regs = agent.agent.regs
    return [x for rs in regs.values() for a, n, _d, _m in rs for x in (a, a + n)]


def _rows(e: KvBuffer, pages: list[int], item: int, nbytes: int) -> list[tuple[int, int, int]]:
    return [(e.ptr + p * item, min(item, nbytes - p * item), e.device) for p in pages]


def write_pages(src: Any, dst: Any, pairs: list[tuple[KvBuffer, KvBuffer, int]],
                next_seq: Callable[[], int]) -> tuple[list[TransferFailure], int, int]:
    """Write the deciding pages of each (prefill buffer, decode buffer, item) pair from
    ``src`` into ``dst`` (agents that loaded each other's metadata); the failures, the
    pages written and the pages there are."""
    edges = registration_edges(src) + registration_edges(dst)
    failures, moved, total = [], 0, 0
    for a, b, item in pairs:
        nbytes = min(a.nbytes, b.nbytes)
        item = max(1, min(item, nbytes))
        pages = sorted(set(deciding_pages(a.ptr, nbytes, item, edges))
                       | set(deciding_pages(b.ptr, nbytes, item, edges)))
        total += -(-nbytes // item)
        local, remote = _rows(a, pages, item, nbytes), _rows(b, pages, item, nbytes)
        seq = next_seq()
        try:
            state = _write(src, dst.name, a.kind, local, remote)
        except NixlError as exc:
            state, status = "raised", _status(exc)
        else:
            status = int(nixl_status_t.NIXL_ERR_BACKEND)   # what a post that ends in ERR is
        if state == "DONE":
            moved += len(pages)
            continue
        failures.append(_culprit(src, dst.name, a, b, pages, local, remote, seq, status))
    return failures, moved, total


def _write(src: Any, peer: str, mem: str, local: list[tuple[int, int, int]],
           remote: list[tuple[int, int, int]]) -> str:
    """One prepared WRITE of ``local`` into ``peer``'s ``remote``: its last state ("DONE"
    or "ERR"); a call that raised raises."""
    lh = src.prep_xfer_dlist(LOCAL, local, mem)
    try:
        rh = src.prep_xfer_dlist(peer, remote, mem)
        try:
            idx = list(range(len(local)))
            xfer = src.make_prepped_xfer("WRITE", lh, idx, rh, idx)
            try:
                state = src.transfer(xfer)
                while state == "PROC":
                    state = src.check_xfer_state(xfer)
            finally:
                src.release_xfer_handle(xfer)
        finally:
            rh.release()
    finally:
        lh.release()
    return str(state)


def _culprit(src: Any, peer: str, a: KvBuffer, b: KvBuffer, pages: list[int],
             local: list[tuple[int, int, int]], remote: list[tuple[int, int, int]],
             seq: int, status: int) -> TransferFailure:
    mem = int(nixl_mem_t.VRAM_SEG if a.kind == "VRAM" else nixl_mem_t.DRAM_SEG)
    mine = src.agent.ranges(mem)
    view = src.agent.remotes.get(peer)
    theirs = view.regs.get(mem, []) if view is not None else []
    peer_agent = src.agent.fake.agents.get(peer)
    for p, lo, re in zip(pages, local, remote, strict=True):
        if src.agent.invalidated([lo]):
            return TransferFailure(seq, a.name, p, "prefill", lo[0], lo[1], status,
                                   invalidated=True)
        if peer_agent is not None and peer_agent.invalidated([re]):
            return TransferFailure(seq, b.name, p, "decode", re[0], re[1], status,
                                   invalidated=True)
        if not covered(mine, lo):
            return TransferFailure(seq, a.name, p, "prefill", lo[0], lo[1], status)
        if not covered(theirs, re):
            return TransferFailure(seq, b.name, p, "decode", re[0], re[1], status)
    return TransferFailure(seq, a.name, pages[0], "prefill", local[0][0], local[0][1], status)
