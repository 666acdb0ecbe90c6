"""Broken: register_memory takes (addr, len, devID, meta) tuples with a memory type, and so
teardown hands deregister_memory the same tuples; the binding accepts only the
nixlRegDList register returned (pybind11's TypeError)."""

from descriptor_lists import KINDS, of_kind


def register(agent, buffers):
    rows = {}
    for kind in KINDS:
        rows[kind] = of_kind(buffers, kind)
        if rows[kind]:
            agent.register_memory(rows[kind], kind)
    return rows


def teardown(agent, handle):
    for rows in handle.values():
        if rows:
            agent.deregister_memory(rows)
