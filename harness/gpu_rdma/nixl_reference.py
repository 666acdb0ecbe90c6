"""kvreg's own registration of a node's KV buffers with a NIXL agent.

One ``get_reg_descs`` + ``register_memory`` per group (and memory kind: NIXL registers one
kind per list), as vLLM's NixlConnector registers one list per memory type. NIXL reports a
failure by raising (the binding's ``nixlBackendError`` and the like, docs/gpu-rdma.md §6),
never by a return value: a failure deregisters the lists this call registered, newest first,
then raises RuntimeError naming the group; teardown deregisters each list once and keeps
only those the agent refused, for a later round.
"""

from __future__ import annotations

from typing import Any

from .buffers import GROUPS, KINDS, KvBuffers

__all__ = ["register", "release", "resume", "teardown"]


def register(agent: Any, buffers: KvBuffers) -> list[Any]:
    """Register every group; the descriptor lists registered (the handle teardown takes)."""
    done: list[Any] = []
    for group in GROUPS:
        for kind in KINDS:
            rows = [(e.ptr, e.nbytes, e.device, "") for e in buffers.group(group)
                    if e.kind == kind]
            if not rows:
                continue
            descs = agent.get_reg_descs(rows, kind)
            try:
                agent.register_memory(descs)
            except Exception as exc:
                left = _release(agent, done)
                more = f"; could not deregister {len(left)} list(s)" if left else ""
                raise RuntimeError(f"register_memory({group}, {kind}, {len(rows)} "
                                   f"descriptors) raised {type(exc).__name__}: {exc}{more}"
                                   ) from exc
            done.append(descs)
    return done


def _release(agent: Any, lists: list[Any]) -> list[Any]:
    """Deregister each list, newest first; the ones the agent refused, in order."""
    failed = []
    for descs in reversed(lists):
        try:
            agent.deregister_memory(descs)
        except Exception:
            failed.append(descs)
    return list(reversed(failed))


def teardown(agent: Any, handle: list[Any]) -> None:
    """Deregister every list once; keep those the agent refused (a later round retries
    them) and raise saying how many."""
    handle[:] = _release(agent, handle)
    if handle:
        raise RuntimeError(f"deregister_memory failed for {len(handle)} descriptor list(s)")


def release(agent: Any, handle: list[Any]) -> None:
    """Before a memory saver releases the KV cache: deregister every list (teardown)."""
    teardown(agent, handle)


def resume(agent: Any, buffers: KvBuffers, handle: list[Any]) -> list[Any]:
    """After it mapped new memory at the same addresses: register the lists again."""
    return register(agent, buffers)
