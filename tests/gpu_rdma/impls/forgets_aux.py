"""Broken: registers the KV group only; the aux (and state) buffers are never registered."""

from engine_calls import batch_register, batch_teardown


def register(engine, buffers):
    batch_register(engine, buffers.kv_data_ptrs, buffers.kv_data_lens)
    return list(buffers.kv_data_ptrs)


def teardown(engine, handle):
    batch_teardown(engine, handle)
