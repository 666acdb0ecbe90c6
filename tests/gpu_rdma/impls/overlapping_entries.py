"""Broken: the KV lists and then every entry in one batch, so each KV buffer is named twice
(Mooncake v0.3.12+ refuses the batch with -7, #2854; older engines accepted it)."""


def register(engine, buffers):
    ptrs = list(buffers.kv_data_ptrs) + [e.ptr for e in buffers.entries]
    lens = list(buffers.kv_data_lens) + [e.nbytes for e in buffers.entries]
    rc = engine.batch_register_memory(ptrs, lens)
    if rc != 0:
        raise RuntimeError(f"batch_register_memory returned {rc}")
    return [e.ptr for e in buffers.entries]


def teardown(engine, handle):
    for base in handle:
        engine.unregister_memory(base)
