"""Broken: teardown releases the batch, then each buffer again (the second unregister of
each base is -3, ERR_ADDRESS_NOT_REGISTERED)."""


def register(engine, buffers):
    ptrs = [e.ptr for e in buffers.entries]
    rc = engine.batch_register_memory(ptrs, [e.nbytes for e in buffers.entries])
    if rc != 0:
        raise RuntimeError(f"batch_register_memory returned {rc}")
    return ptrs


def teardown(engine, handle):
    engine.batch_unregister_memory(handle)
    for base in handle:
        engine.unregister_memory(base)
