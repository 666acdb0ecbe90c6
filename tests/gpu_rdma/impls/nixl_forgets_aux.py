"""Broken: registers the GPU buffers (one VRAM list) and forgets the host aux buffers."""

from descriptor_lists import of_kind, teardown

__all__ = ["register", "teardown"]


def register(agent, buffers):
    descs = agent.get_reg_descs(of_kind(buffers, "VRAM"), "VRAM")
    agent.register_memory(descs)
    return [descs]

