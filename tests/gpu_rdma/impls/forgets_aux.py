"""Broken: registers the KV group only; the aux (and state) buffers are never registered."""


def register(engine, buffers):
    rc = engine.batch_register_memory(buffers.kv_data_ptrs, buffers.kv_data_lens)
    if rc != 0:
        raise RuntimeError(f"batch_register_memory returned {rc}")
    return list(buffers.kv_data_ptrs)


def teardown(engine, handle):
    if engine.batch_unregister_memory(handle) != 0:
        raise RuntimeError("batch_unregister_memory failed")
