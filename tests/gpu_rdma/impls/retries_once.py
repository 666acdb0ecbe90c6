"""Correct: each buffer registered with one retry after a failure (a transient NIC error
clears); a second failure rolls back and raises."""

from engine_calls import keep_refused, unregister_all


def register(engine, buffers):
    done = []
    for e in buffers.entries:
        ret = engine.register_memory(e.ptr, e.nbytes)
        if ret != 0:
            ret = engine.register_memory(e.ptr, e.nbytes)
        if ret != 0:
            unregister_all(engine, reversed(done))
            raise RuntimeError(f"register_memory({e.name}) failed twice: {ret}")
        done.append(e.ptr)
    return done


def teardown(engine, handle):
    if keep_refused(engine, handle):
        raise RuntimeError(f"{len(handle)} unregister(s) failed")


teardown.repeatable = True
