"""Correct around a memory saver's pause, written as SGLang's Mooncake KV manager handles it
since sglang #27696: one batch per group, every result checked; ``release`` deregisters the
groups before the KV cache's memory is released, ``resume`` registers them again after it is
mapped anew."""


def register(engine, buffers):
    groups = []
    for ptrs, lens in ((buffers.kv_data_ptrs, buffers.kv_data_lens),
                       (buffers.aux_data_ptrs, buffers.aux_data_lens),
                       (buffers.state_data_ptrs, buffers.state_data_lens)):
        if not ptrs:
            continue
        ret = engine.batch_register_memory(list(ptrs), list(lens))
        if ret != 0:
            for done in reversed(groups):
                engine.batch_unregister_memory(done)
            raise RuntimeError(f"Mooncake batch registration failed: {ret}")
        groups.append(list(ptrs))
    return groups


def teardown(engine, handle):
    while handle:
        ret = engine.batch_unregister_memory(handle[-1])
        if ret != 0:
            raise RuntimeError(f"Mooncake batch unregistration failed: {ret}")
        handle.pop()


teardown.repeatable = True


def release(engine, handle):
    teardown(engine, handle)


def resume(engine, buffers, handle):
    return register(engine, buffers)
