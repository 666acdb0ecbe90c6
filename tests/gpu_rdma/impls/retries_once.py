"""Correct: each buffer registered with one retry after a failure (a transient NIC error
clears); a second failure rolls back and raises."""


def register(engine, buffers):
    done = []
    for e in buffers.entries:
        ret = engine.register_memory(e.ptr, e.nbytes)
        if ret != 0:
            ret = engine.register_memory(e.ptr, e.nbytes)
        if ret != 0:
            for base in reversed(done):
                engine.unregister_memory(base)
            raise RuntimeError(f"register_memory({e.name}) failed twice: {ret}")
        done.append(e.ptr)
    return done


def teardown(engine, handle):
    left = [b for b in handle if engine.unregister_memory(b) != 0]
    handle[:] = left
    if left:
        raise RuntimeError(f"{len(left)} unregister(s) failed")


teardown.repeatable = True
