"""What the nixl-style implementations here share: NIXL's descriptor tuples of a KvBuffers
entry, the lists registered one per memory kind or one per buffer (with or without a
rollback) and the one-round teardown that deregisters them newest first. Each implementation
keeps only its bug or its way of being correct. Imported by its siblings (kvreg puts an
implementation's folder first on ``sys.path``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

KINDS = ("VRAM", "DRAM")    # NIXL's memory types of the GPU and the host buffers


def desc_rows(entries: Iterable[Any]) -> list[tuple[int, int, int, str]]:
    """(addr, len, devID, meta) of each entry: the tuples ``get_reg_descs`` takes."""
    return [(e.ptr, e.nbytes, e.device, "") for e in entries]


def of_kind(buffers: Any, kind: str) -> list[tuple[int, int, int, str]]:
    """The descriptor tuples of the buffers of memory type ``kind``."""
    return desc_rows(e for e in buffers.entries if e.kind == kind)


def register_kinds(agent: Any, buffers: Any, done: list[Any]) -> list[Any]:
    """One list per memory kind (VRAM, then DRAM; a kind with no buffer skipped), each
    appended to ``done`` once registered: a raise propagates with ``done`` holding the lists
    before it."""
    for kind in KINDS:
        rows = of_kind(buffers, kind)
        if rows:
            descs = agent.get_reg_descs(rows, kind)
            agent.register_memory(descs)
            done.append(descs)
    return done


def register_each(agent: Any, buffers: Any, done: list[Any]) -> list[Any]:
    """One single-descriptor list per buffer, likewise."""
    for e in buffers.entries:
        descs = agent.get_reg_descs(desc_rows([e]), e.kind)
        agent.register_memory(descs)
        done.append(descs)
    return done


def all_or_none(agent: Any, fill: Callable[[list[Any]], Any]) -> list[Any]:
    """The lists ``fill(done)`` registers; if it raises, those it registered are
    deregistered, oldest first, and the exception propagates."""
    done: list[Any] = []
    try:
        fill(done)
    except Exception:
        for descs in done:
            agent.deregister_memory(descs)
        raise
    return done


def teardown(agent: Any, handle: list[Any]) -> None:
    """Deregister the lists newest first, each dropped before its call (one round: a list
    the agent refused is forgotten)."""
    while handle:
        agent.deregister_memory(handle.pop())
