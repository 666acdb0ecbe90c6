"""Correct around a memory saver's pause, written differently: no ``release`` hook; after
resume each old registration (its MR invalidated by the pause) is unregistered, which the
engine still accepts, and every buffer is registered again, one register_memory each."""


def register(engine, buffers):
    registered = {}
    try:
        for entry in buffers.entries:
            ret = engine.register_memory(entry.ptr, entry.nbytes)
            if ret != 0:
                raise RuntimeError(f"register_memory({entry.name}) returned {ret}")
            registered[entry.name] = entry.ptr
    except Exception:
        for ptr in registered.values():
            engine.unregister_memory(ptr)
        raise
    return registered


def teardown(engine, handle):
    failed = {name: ptr for name, ptr in handle.items() if engine.unregister_memory(ptr) != 0}
    handle.clear()
    handle.update(failed)
    if failed:
        raise RuntimeError(f"unregister_memory failed for {sorted(failed)}")


teardown.repeatable = True


def resume(engine, buffers, handle):
    teardown(engine, handle)
    return register(engine, buffers)
