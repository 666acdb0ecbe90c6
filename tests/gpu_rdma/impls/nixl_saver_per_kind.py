"""Correct around a memory saver's pause over NIXL, written as vLLM's NixlConnector offers it
for sleep mode: one list per memory type; ``release`` deregisters the lists
(``unregister_kv_caches``), ``resume`` registers them again (``restore_kv_caches``)."""


def register(agent, buffers):
    registered = []
    try:
        for kind in ("VRAM", "DRAM"):
            rows = [(e.ptr, e.nbytes, e.device, "") for e in buffers.entries if e.kind == kind]
            if rows:
                descs = agent.get_reg_descs(rows, kind)
                agent.register_memory(descs)
                registered.append(descs)
    except Exception:
        for descs in registered:
            agent.deregister_memory(descs)
        raise
    return registered


def teardown(agent, handle):
    while handle:
        agent.deregister_memory(handle[-1])
        handle.pop()


teardown.repeatable = True


def release(agent, handle):
    teardown(agent, handle)


def resume(agent, buffers, handle):
    return register(agent, buffers)
