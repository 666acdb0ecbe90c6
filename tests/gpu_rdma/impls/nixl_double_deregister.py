"""Broken: a teardown declared repeatable that does not forget what it deregistered, so a
second round deregisters the same lists again (as a shutdown path calling
unregister_kv_caches twice)."""

from descriptor_lists import register_kinds


def register(agent, buffers):
    return register_kinds(agent, buffers, [])


def teardown(agent, handle):
    for descs in handle:
        agent.deregister_memory(descs)


teardown.repeatable = True
