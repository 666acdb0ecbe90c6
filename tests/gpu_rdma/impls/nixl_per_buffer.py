"""Correct, one single-descriptor list per buffer (register_memory of each entry alone),
every raise propagated after the buffers already registered are deregistered."""


def register(agent, buffers):
    done = []
    try:
        for e in buffers.entries:
            descs = agent.get_reg_descs([(e.ptr, e.nbytes, e.device, "")], e.kind)
            agent.register_memory(descs)
            done.append(descs)
    except Exception:
        for descs in done:
            agent.deregister_memory(descs)
        raise
    return done


def teardown(agent, handle):
    while handle:
        agent.deregister_memory(handle[0])
        del handle[0]


teardown.repeatable = True
