"""Broken: one batch of every group, with a zero-length placeholder where a group has no
buffer yet (the address of a pinned scratch word, length 0): Mooncake v0.3.12+ refuses the
batch with -1 (#2854)."""

import ctypes

from engine_calls import batch_register

_SCRATCH = ctypes.create_string_buffer(8)


def register(engine, buffers):
    ptrs, lens = [], []
    for group in ("kv", "aux", "state"):
        got = getattr(buffers, f"{group}_data_ptrs")
        ptrs += got or [ctypes.addressof(_SCRATCH)]
        lens += getattr(buffers, f"{group}_data_lens") or [0]
    batch_register(engine, ptrs, lens)
    return ptrs


def teardown(engine, handle):
    engine.batch_unregister_memory(handle)
