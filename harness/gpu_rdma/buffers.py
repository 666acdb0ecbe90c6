"""What a ``gpu_rdma`` style's register receives: the buffers of one node's KV pool, in the
shape SGLang's ``KVArgs`` gives its Mooncake KV manager (``kv_data_ptrs``/``kv_data_lens``/
``kv_item_lens``, the same for ``aux_`` and ``state_``, and ``gpu_id``), plus every buffer
as one ``KvBuffer`` entry with its memory kind and device, which is what vLLM's
MooncakeConnector (``register_kv_caches``: one entry per cache tensor) and a NIXL
registration (``get_reg_descs`` of (addr, len, dev) with VRAM/DRAM) are written against.

SGLang's ``register_buffer_to_engine`` maps onto it as
``engine.batch_register_memory(b.kv_data_ptrs, b.kv_data_lens)`` then the same for
``aux_`` and ``state_``; vLLM's as ``[engine.register_memory(e.ptr, e.nbytes) for e in
b.entries]`` or one batch of ``[e.ptr ...]`` / ``[e.nbytes ...]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["GROUPS", "KINDS", "KvBuffer", "KvBuffers", "make_buffers"]

# the memory kinds (NIXL's names) and the KVArgs groups, in registration order
KINDS = ("VRAM", "DRAM")
GROUPS = ("kv", "aux", "state")

Kind = Literal["VRAM", "DRAM"]
Group = Literal["kv", "aux", "state"]


@dataclass(frozen=True)
class KvBuffer:
    """One buffer of the pool: a layer's K or V (or MLA latent) on the GPU, an aux or state
    buffer; ``device`` is the CUDA ordinal for VRAM and 0 for DRAM (NIXL's convention)."""

    name: str
    ptr: int
    nbytes: int
    kind: Kind
    device: int
    group: Group


@dataclass(frozen=True)
class KvBuffers:
    """One node's buffers: the KVArgs lists per group (empty where the pool has none) and
    ``entries``, the same buffers in the same order (kv, then aux, then state)."""

    kv_data_ptrs: list[int] = field(default_factory=list)
    kv_data_lens: list[int] = field(default_factory=list)
    kv_item_lens: list[int] = field(default_factory=list)
    aux_data_ptrs: list[int] = field(default_factory=list)
    aux_data_lens: list[int] = field(default_factory=list)
    aux_item_lens: list[int] = field(default_factory=list)
    state_data_ptrs: list[int] = field(default_factory=list)
    state_data_lens: list[int] = field(default_factory=list)
    state_item_lens: list[int] = field(default_factory=list)
    gpu_id: int = 0
    entries: tuple[KvBuffer, ...] = ()

    def group(self, name: str) -> tuple[KvBuffer, ...]:
        """The entries of one group (``kv``, ``aux`` or ``state``), in order."""
        return tuple(e for e in self.entries if e.group == name)


def make_buffers(entries: Sequence[KvBuffer], item_lens: dict[str, list[int]],
                 gpu_id: int = 0) -> KvBuffers:
    """The KvBuffers of ``entries`` (any order; kept kv, aux, state): each group's ptr and
    len lists from its entries, its item lens as given (one per buffer)."""
    ordered = tuple(e for g in GROUPS for e in entries if e.group == g)
    lists: dict[str, list[int]] = {}
    for g in GROUPS:
        members = [e for e in ordered if e.group == g]
        items = list(item_lens.get(g, []))
        if len(items) != len(members):
            raise ValueError(f"{g}: {len(items)} item lens for {len(members)} buffers")
        lists[f"{g}_data_ptrs"] = [e.ptr for e in members]
        lists[f"{g}_data_lens"] = [e.nbytes for e in members]
        lists[f"{g}_item_lens"] = items
    return KvBuffers(gpu_id=gpu_id, entries=ordered, **lists)
