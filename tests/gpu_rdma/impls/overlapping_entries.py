"""Broken: the KV lists and then every entry in one batch, so each KV buffer is named twice
(Mooncake v0.3.12+ refuses the batch with -7, #2854; older engines accepted it)."""

from engine_calls import batch_register, unregister_all


def register(engine, buffers):
    ptrs = list(buffers.kv_data_ptrs) + [e.ptr for e in buffers.entries]
    lens = list(buffers.kv_data_lens) + [e.nbytes for e in buffers.entries]
    batch_register(engine, ptrs, lens)
    return [e.ptr for e in buffers.entries]


def teardown(engine, handle):
    unregister_all(engine, handle)
