"""Correct, one single-descriptor list per buffer (register_memory of each entry alone),
every raise propagated after the buffers already registered are deregistered."""

from functools import partial

from descriptor_lists import all_or_none, register_each


def register(agent, buffers):
    return all_or_none(agent, partial(register_each, agent, buffers))


def teardown(agent, handle):
    while handle:
        agent.deregister_memory(handle[0])
        del handle[0]


teardown.repeatable = True
