"""Correct with one teardown round: register_memory per buffer with rollback; teardown
unregisters each base once and raises naming those the engine refused, declaring no
repeatable teardown (a refused one stays registered until the process exits)."""

from engine_calls import refused, unregister_all


def register(engine, buffers):
    done = []
    for e in buffers.entries:
        if engine.register_memory(e.ptr, e.nbytes) != 0:
            unregister_all(engine, done)
            raise RuntimeError(f"register_memory({e.name}) failed")
        done.append(e.ptr)
    return done


def teardown(engine, handle):
    left = refused(engine, handle)
    if left:
        raise RuntimeError(f"unregister_memory refused {len(left)} buffer(s)")
