"""Broken: a correct register, and a teardown that releases nothing."""


def register(engine, buffers):
    for e in buffers.entries:
        if engine.register_memory(e.ptr, e.nbytes) != 0:
            raise RuntimeError(f"register_memory({e.name}) failed")
    return None


def teardown(engine, handle):
    return None
