"""Correct, written as code that registers its pool's memory in as few regions as it can:
buffers that lie back to back are one register_memory call over their span, every return
checked, the registered regions unregistered before raising."""


def register(engine, buffers):
    runs = []
    for entry in sorted(buffers.entries, key=lambda e: e.ptr):
        if runs and runs[-1][0] + runs[-1][1] == entry.ptr:
            runs[-1][1] += entry.nbytes
        else:
            runs.append([entry.ptr, entry.nbytes])
    registered = []
    try:
        for ptr, nbytes in runs:
            ret = engine.register_memory(ptr, nbytes)
            if ret != 0:
                raise RuntimeError(f"Mooncake memory registration failed at {ptr:#x} "
                                   f"(ret={ret})")
            registered.append(ptr)
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
