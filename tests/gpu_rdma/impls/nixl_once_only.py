"""Correct, with one teardown round (no repeatable attribute): every list is tried, the
failures collected and raised together at the end."""


def register(agent, buffers):
    done = []
    try:
        for kind in ("VRAM", "DRAM"):
            rows = [(e.ptr, e.nbytes, e.device, "") for e in buffers.entries if e.kind == kind]
            if rows:
                descs = agent.get_reg_descs(rows, kind)
                agent.register_memory(descs)
                done.append(descs)
    except Exception:
        for descs in done:
            agent.deregister_memory(descs)
        raise
    return done


def teardown(agent, handle):
    errors = []
    for descs in handle:
        try:
            agent.deregister_memory(descs)
        except Exception as exc:
            errors.append(exc)
    if errors:
        raise RuntimeError(f"{len(errors)} deregistration(s) failed: {errors}")
