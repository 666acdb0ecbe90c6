"""Broken: teardown releases the batch, then each buffer again (the second unregister of
each base is -3, ERR_ADDRESS_NOT_REGISTERED)."""

from engine_calls import batch_register, unregister_all


def register(engine, buffers):
    ptrs = [e.ptr for e in buffers.entries]
    batch_register(engine, ptrs, [e.nbytes for e in buffers.entries])
    return ptrs


def teardown(engine, handle):
    engine.batch_unregister_memory(handle)
    unregister_all(engine, handle)
