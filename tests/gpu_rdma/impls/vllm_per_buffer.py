"""Correct, written as vLLM's MooncakeConnector registers: register_memory per cache tensor,
every return checked; on a failure the registered ones are unregistered before raising."""

from engine_calls import keep_refused, unregister_all


def register(engine, buffers):
    registered = []
    try:
        for entry in buffers.entries:
            ret = engine.register_memory(entry.ptr, entry.nbytes)
            if ret != 0:
                raise RuntimeError(f"Mooncake memory registration failed for {entry.name} "
                                   f"(ret={ret})")
            registered.append(entry.ptr)
    except Exception:
        unregister_all(engine, registered)
        raise
    return registered


def teardown(engine, handle):
    if keep_refused(engine, handle):
        raise RuntimeError(f"unregister_memory failed for {len(handle)} buffer(s)")


teardown.repeatable = True
