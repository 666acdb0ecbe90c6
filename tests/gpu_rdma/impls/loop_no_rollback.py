"""Broken: register_memory per buffer, raises on the first failure without unregistering
the buffers before it."""

from engine_calls import unregister_all


def register(engine, buffers):
    done = []
    for e in buffers.entries:
        rc = engine.register_memory(e.ptr, e.nbytes)
        if rc:
            raise RuntimeError(f"register_memory({e.name}) returned {rc}")
        done.append(e.ptr)
    return done


def teardown(engine, handle):
    unregister_all(engine, handle)
