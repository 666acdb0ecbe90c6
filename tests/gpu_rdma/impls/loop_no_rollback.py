"""Broken: register_memory per buffer, raises on the first failure without unregistering
the buffers before it."""


def register(engine, buffers):
    done = []
    for e in buffers.entries:
        rc = engine.register_memory(e.ptr, e.nbytes)
        if rc:
            raise RuntimeError(f"register_memory({e.name}) returned {rc}")
        done.append(e.ptr)
    return done


def teardown(engine, handle):
    for base in handle:
        engine.unregister_memory(base)
