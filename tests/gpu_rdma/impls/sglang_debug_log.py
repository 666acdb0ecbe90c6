"""Broken: SGLang's MooncakeTransferEngine.batch_register as shipped before the fix: one
batch per group, a nonzero return only logged at DEBUG, register returns normally."""

import logging

log = logging.getLogger("mooncake_kv")


def register(engine, buffers):
    groups = [(buffers.kv_data_ptrs, buffers.kv_data_lens),
              (buffers.aux_data_ptrs, buffers.aux_data_lens),
              (buffers.state_data_ptrs, buffers.state_data_lens)]
    for ptrs, lens in groups:
        if ptrs:
            rc = engine.batch_register_memory(ptrs, lens)
            if rc != 0:
                log.debug("Mooncake memory registration %s failed.", ptrs)
    return [p for ptrs, _ in groups for p in ptrs]


def teardown(engine, handle):
    engine.batch_unregister_memory(handle)
