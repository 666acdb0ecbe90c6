"""Broken: a teardown declared repeatable that does not forget what it deregistered, so a
second round deregisters the same lists again (as a shutdown path calling
unregister_kv_caches twice)."""


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
    for descs in handle:
        agent.deregister_memory(descs)


teardown.repeatable = True
