"""Correct with one teardown round: register_memory per buffer with rollback; teardown
unregisters each base once and raises naming those the engine refused, declaring no
repeatable teardown (a refused one stays registered until the process exits)."""


def register(engine, buffers):
    done = []
    for e in buffers.entries:
        if engine.register_memory(e.ptr, e.nbytes) != 0:
            for base in done:
                engine.unregister_memory(base)
            raise RuntimeError(f"register_memory({e.name}) failed")
        done.append(e.ptr)
    return done


def teardown(engine, handle):
    refused = [b for b in handle if engine.unregister_memory(b) != 0]
    if refused:
        raise RuntimeError(f"unregister_memory refused {len(refused)} buffer(s)")
