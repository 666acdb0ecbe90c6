"""Broken: teardown deregisters the KV descriptors in one list built from both the kv group
and every VRAM entry, so each KV descriptor is in it twice (the real agent dies)."""


def register(agent, buffers):
    done = []
    for kind in ("VRAM", "DRAM"):
        rows = [(e.ptr, e.nbytes, e.device, "") for e in buffers.entries if e.kind == kind]
        if rows:
            descs = agent.get_reg_descs(rows, kind)
            agent.register_memory(descs)
            done.append(descs)
    return buffers


def teardown(agent, buffers):
    rows = [(e.ptr, e.nbytes, e.device, "") for e in buffers.group("kv")]
    rows += [(e.ptr, e.nbytes, e.device, "") for e in buffers.entries if e.kind == "VRAM"]
    agent.deregister_memory(agent.get_reg_descs(rows, "VRAM"))
    dram = [(e.ptr, e.nbytes, e.device, "") for e in buffers.entries if e.kind == "DRAM"]
    if dram:
        agent.deregister_memory(agent.get_reg_descs(dram, "DRAM"))
