"""Correct, one descriptor list per KvBuffers group (kv, aux, state: each one memory kind),
as a KV manager that keeps its groups apart registers; a failure deregisters what was
registered, newest first, and raises."""

from descriptor_lists import desc_rows


def register(agent, buffers):
    done = []
    for group in ("kv", "aux", "state"):
        entries = buffers.group(group)
        if not entries:
            continue
        descs = agent.get_reg_descs(desc_rows(entries), entries[0].kind)
        try:
            agent.register_memory(descs)
        except Exception:
            for earlier in reversed(done):
                agent.deregister_memory(earlier)
            raise
        done.append(descs)
    return done


def teardown(agent, handle):
    for descs in list(handle):
        agent.deregister_memory(descs)
        handle.remove(descs)


teardown.repeatable = True
