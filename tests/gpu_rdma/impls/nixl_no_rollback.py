"""Broken: one list per buffer, and a failure propagates with the earlier lists left
registered."""

from descriptor_lists import register_each, teardown

__all__ = ["register", "teardown"]


def register(agent, buffers):
    return register_each(agent, buffers, [])

