"""Correct on Mooncake v0.3.12 and later: SGLang's register_buffer_to_engine with its result
checked: one batch per group (kv, aux, state); a refused batch is rolled back by the engine
(#2869), the groups before it by a batch unregister, then it raises. On older engines a batch
could drop a failure (#2869), which this code cannot see."""


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
