"""Correct, written as vLLM's NixlConnector registers: one get_reg_descs + register_memory
per memory type (VRAM for the GPU buffers, DRAM for the host ones); NIXL raises on a failure
and the lists already registered are deregistered before it propagates."""


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
