"""Broken: registers the GPU buffers (one VRAM list) and forgets the host aux buffers."""


def register(agent, buffers):
    rows = [(e.ptr, e.nbytes, e.device, "") for e in buffers.entries if e.kind == "VRAM"]
    descs = agent.get_reg_descs(rows, "VRAM")
    agent.register_memory(descs)
    return [descs]


def teardown(agent, handle):
    while handle:
        agent.deregister_memory(handle.pop())
