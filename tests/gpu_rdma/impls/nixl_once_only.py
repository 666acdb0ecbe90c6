"""Correct, with one teardown round (no repeatable attribute): every list is tried, the
failures collected and raised together at the end."""

from functools import partial

from descriptor_lists import all_or_none, register_kinds


def register(agent, buffers):
    return all_or_none(agent, partial(register_kinds, agent, buffers))


def teardown(agent, handle):
    errors = []
    for descs in handle:
        try:
            agent.deregister_memory(descs)
        except Exception as exc:
            errors.append(exc)
    if errors:
        raise RuntimeError(f"{len(errors)} deregistration(s) failed: {errors}")
