"""Broken: teardown deregisters the KV descriptors in one list built from both the kv group
and every VRAM entry, so each KV descriptor is in it twice (the real agent dies)."""

from descriptor_lists import desc_rows, of_kind, register_kinds


def register(agent, buffers):
    register_kinds(agent, buffers, [])
    return buffers


def teardown(agent, buffers):
    rows = desc_rows(buffers.group("kv")) + of_kind(buffers, "VRAM")
    agent.deregister_memory(agent.get_reg_descs(rows, "VRAM"))
    dram = of_kind(buffers, "DRAM")
    if dram:
        agent.deregister_memory(agent.get_reg_descs(dram, "DRAM"))
