"""Correct, written as vLLM's MooncakeConnector registers: register_memory per cache tensor,
every return checked; on a failure the registered ones are unregistered before raising."""


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
        for ptr in registered:
            engine.unregister_memory(ptr)
        raise
    return registered


def teardown(engine, handle):
    errors = [ptr for ptr in handle if engine.unregister_memory(ptr) != 0]
    handle[:] = errors
    if errors:
        raise RuntimeError(f"unregister_memory failed for {len(errors)} buffer(s)")


teardown.repeatable = True
