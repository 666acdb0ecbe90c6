"""kvreg's own registration of a node's KV buffers with a Mooncake Transfer Engine.

Each buffer is registered by ``register_memory`` and every return checked. Not one
``batch_register_memory`` per group: before Mooncake v0.3.12 a batch logged a failed
buffer's warning and returned 0 (#2869, docs/mooncake-verbs.md §8.3), so only the single
call reports a failure on every engine version. A failure unregisters what this call
registered, newest first, then raises RuntimeError naming the buffer and the code; teardown
unregisters each buffer once, by its base, and forgets it, keeping only those the engine
refused for a later round. Around a memory saver's pause (docs/gpu-rdma.md §7) ``release``
unregisters as teardown does and ``resume`` registers the buffers again, as SGLang's
Mooncake KV manager does since sglang #27696.
"""

from __future__ import annotations

from typing import Any

from .buffers import KvBuffers

__all__ = ["register", "release", "resume", "teardown"]


def register(engine: Any, buffers: KvBuffers) -> list[int]:
    """Register every buffer; the bases registered (the handle teardown takes)."""
    done: list[int] = []
    for entry in buffers.entries:
        rc = engine.register_memory(entry.ptr, entry.nbytes)
        if rc != 0:
            undo = [base for base in reversed(done) if engine.unregister_memory(base) != 0]
            left = f"; could not unregister {[hex(b) for b in undo]}" if undo else ""
            raise RuntimeError(f"register_memory({entry.name} {entry.ptr:#x}, "
                               f"{entry.nbytes}) returned {rc}{left}")
        done.append(entry.ptr)
    return done


def teardown(engine: Any, handle: list[int]) -> None:
    """Unregister every base once, newest first; keep those whose unregister failed (a
    later round retries them) and raise naming them."""
    failed = [(base, rc) for base in reversed(handle)
              if (rc := engine.unregister_memory(base)) != 0]
    handle[:] = [base for base, _ in reversed(failed)]
    if failed:
        raise RuntimeError("unregister_memory failed: "
                           + ", ".join(f"{b:#x} -> {rc}" for b, rc in failed))


def release(engine: Any, handle: list[int]) -> None:
    """Before the memory saver releases the KV cache: unregister everything (teardown)."""
    teardown(engine, handle)


def resume(engine: Any, buffers: KvBuffers, handle: list[int]) -> list[int]:
    """After it mapped new memory at the same addresses: register the buffers again."""
    return register(engine, buffers)
