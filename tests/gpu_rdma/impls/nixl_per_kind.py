"""Correct, written as vLLM's NixlConnector registers: one get_reg_descs + register_memory
per memory type (VRAM for the GPU buffers, DRAM for the host ones); NIXL raises on a failure
and the lists already registered are deregistered before it propagates."""

from functools import partial

from descriptor_lists import all_or_none, register_kinds


def register(agent, buffers):
    return all_or_none(agent, partial(register_kinds, agent, buffers))


def teardown(agent, handle):
    while handle:
        agent.deregister_memory(handle[-1])
        handle.pop()


teardown.repeatable = True
