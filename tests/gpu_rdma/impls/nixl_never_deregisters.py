"""Broken: a correct register, and a teardown that deregisters nothing."""


def register(agent, buffers):
    done = []
    for kind in ("VRAM", "DRAM"):
        rows = [(e.ptr, e.nbytes, e.device, "") for e in buffers.entries if e.kind == kind]
        if rows:
            descs = agent.get_reg_descs(rows, kind)
            agent.register_memory(descs)
            done.append(descs)
    return done


def teardown(agent, handle):
    return None
