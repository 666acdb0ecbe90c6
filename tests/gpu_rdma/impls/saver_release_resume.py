"""Correct around a memory saver's pause, written as SGLang's Mooncake KV manager handles it
since sglang #27696: register and teardown are SGLang's checked batches, imported from a
sibling module (so the hooks below are found in the module ``--impl`` names, not in
register's own); ``release`` deregisters the groups before the KV cache's memory is
released, ``resume`` registers them again after it is mapped anew."""

from sglang_batch_fixed import register, teardown

__all__ = ["register", "release", "resume", "teardown"]


def release(engine, handle):
    teardown(engine, handle)


def resume(engine, buffers, handle):
    return register(engine, buffers)
