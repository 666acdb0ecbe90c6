"""What a failed registration leaves in the fake NIXL agent, and so in its metadata
(docs/nixl.md §3.3): a backend that refuses one descriptor of a list leaves none of the list
registered and the section of its memory type made if there was none; an empty section makes
the metadata unloadable in every peer until a registration of that type fills it or a
deregistration empties it away. Every case was run on nixl-cu12 1.5.1 in the tier's network
namespace (2026-12-02, DRAM refused by UCX at address 0) [OBS-local] and follows
nixlLocalSection::addDescList / remDescList / serialize and
nixlRemoteSection::loadRemoteData (src/infra/nixl_memory_section.cpp) [verified]. An
injected ``nixl.register_memory`` fault stands for such a failure and leaves the same state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kvreg.fakes.nixl import FakeNixl

from ..helpers.nixl_pair import KiB, Pair

NULL = (0, 4 * KiB, 0, "")      # UCX's ucp_mem_map refuses a DRAM range at address 0


def _refused(pair: Pair, agent: Any, rows: list[tuple[int, int, int, str]]) -> None:
    """A DRAM list whose last descriptor the backend refuses."""
    with pytest.raises(pair.bind.nixlBackendError):
        agent.register_memory([*rows, NULL], "DRAM")


def _injected(pair: Pair, agent: Any, rows: list[tuple[int, int, int, str]]) -> None:
    """The same list's register_memory failing by the fault plan (its rows are fine)."""
    pair.fake.inject("register_memory", nth=1, error="NIXL_ERR_BACKEND")
    with pytest.raises(pair.bind.nixlBackendError):
        agent.register_memory(rows or [(pair.pb + 8 * KiB, 64, 0, "")], "DRAM")


FAILS: dict[str, Callable[[Pair, Any, list[tuple[int, int, int, str]]], None]] = {
    "refused": _refused, "injected": _injected}


def _loads(pair: Pair, loader: Any, owner: Any) -> str:
    try:
        loader.add_remote_agent(owner.get_agent_metadata())
    except Exception as exc:    # the status exception, named
        return type(exc).__name__
    return "ok"


@pytest.mark.parametrize("how", FAILS)
def test_a_failure_on_an_agent_with_no_dram_leaves_its_metadata_unloadable(
        pair: Pair, how: str) -> None:
    FAILS[how](pair, pair.b, [(pair.pb, 64, 0, "")])
    assert pair.b.agent.regs == {0: []}                  # the section, empty
    assert _loads(pair, pair.a, pair.b) == "nixlNotFoundError"
    # the empty section is there: the deregistration's lookup fails, not the backend's
    with pytest.raises(pair.bind.nixlNotFoundError):
        pair.b.deregister_memory(pair.rd(pair.b, [(pair.pb, 64, 0)]))
    # a DRAM registration fills the section: a fresh peer loads it; the agent that failed
    # to load it never can (UCX kept the connection it forgot)
    pair.b.register_memory([(pair.pb, 4 * KiB, 0, "")], "DRAM")
    c = pair.api.nixl_agent("C", pair.api.nixl_agent_config(backends=["UCX"]))
    assert _loads(pair, c, pair.b) == "ok"
    assert _loads(pair, pair.a, pair.b) == "nixlInvalidParamError"


@pytest.mark.parametrize("how", FAILS)
def test_a_failure_beside_registrations_of_its_type_rolls_back_and_poisons_nothing(
        pair: Pair, how: str) -> None:
    b, pb = pair.b, pair.pb
    b.register_memory([(pb, 4 * KiB, 0, "")], "DRAM")
    pair.a.register_memory([(pair.pa, 4 * KiB, 0, "")], "DRAM")
    assert _loads(pair, pair.a, b) == "ok"
    FAILS[how](pair, b, [(pb + 4 * KiB, 64, 0, "")])
    assert b.agent.ranges(0) == [(pb, 4 * KiB, 0)]        # nothing of the list stayed
    assert _loads(pair, pair.a, b) == "ok"               # a reload too
    with pytest.raises(pair.bind.nixlNotFoundError):
        pair.a.initialize_xfer("WRITE", pair.xd(pair.a, [(pair.pa, 64, 0)]),
                               pair.xd(pair.a, [(pb + 4 * KiB, 64, 0)]), "B")
    h = pair.a.initialize_xfer("WRITE", pair.xd(pair.a, [(pair.pa, 64, 0)]),
                               pair.xd(pair.a, [(pb, 64, 0)]), "B")
    assert pair.a.transfer(h) in ("PROC", "DONE")


def test_a_section_its_deregistration_empties_is_gone(pair: Pair) -> None:
    b, pb = pair.b, pair.pb
    regs = b.register_memory([(pb, 4 * KiB, 0, "")], "DRAM")
    b.deregister_memory(regs)
    assert b.agent.regs == {}
    assert _loads(pair, pair.a, b) == "ok"               # no empty section behind
    # so a refusal then meets no DRAM section and leaves an empty one
    _refused(pair, b, [])
    c = pair.api.nixl_agent("C", pair.api.nixl_agent_config(backends=["UCX"]))
    assert _loads(pair, c, b) == "nixlNotFoundError"


def test_a_null_address_is_refused_only_with_a_length(pair: Pair) -> None:
    # [OBS-local] "undefined address with nonzero length requires UCP_MEM_MAP_ALLOCATE flag"
    pair.a.register_memory([(0, 0, 0, "")], "DRAM")
    with pytest.raises(pair.bind.nixlBackendError) as exc:
        pair.a.register_memory([(0, 1, 0, "")], "DRAM")
    assert "failed to ucp_mem_map: Invalid parameter" in exc.value.kvreg_detail


def test_a_fault_the_agent_raises_before_any_backend_leaves_no_section(pair: Pair) -> None:
    # NIXL_ERR_NOT_FOUND is registerMem's refusal before a backend takes the list (no
    # backend for the memory type): nothing is made [verified: nixlAgent::registerMem]
    pair.fake.inject("register_memory", nth=1, error="NIXL_ERR_NOT_FOUND")
    with pytest.raises(pair.bind.nixlNotFoundError):
        pair.b.register_memory([(pair.pb, 64, 0, "")], "DRAM")
    assert pair.b.agent.regs == {}
    assert _loads(pair, pair.a, pair.b) == "ok"


def test_an_injected_fault_on_an_agent_without_the_backend_makes_no_section() -> None:
    fake = FakeNixl("ucx-host")
    with fake.patch():
        import nixl._api as api

        bare = api.nixl_agent("bare", api.nixl_agent_config(backends=[]))
        fake.inject("register_memory", nth=1, error="NIXL_ERR_BACKEND")
        with pytest.raises(Exception, match="NIXL_ERR_BACKEND"):
            bare.register_memory([(4096, 64, 0, "")], "DRAM")
        assert bare.agent.regs == {}


def test_a_vram_refusal_beside_registered_vram_leaves_the_metadata_whole() -> None:
    # the ucx-cuda profile: VRAM registered in a device allocation, then a range past it
    # refused; the VRAM section keeps the first, so peers load the metadata [verified]
    from kvreg.fakes.cuda.fake_cuda import FakeCuda

    from ..helpers.gpu_memory import ready_driver

    cuda = FakeCuda("h200-r580")
    err, ptr = ready_driver(cuda).cuMemAlloc(8 << 20)
    assert int(err) == 0
    fake = FakeNixl("ucx-cuda", gpu=cuda.gpu_memory())
    a, b = fake.agent("A"), fake.agent("B")
    b.register_memory([(int(ptr), 4 << 20, 0, "")], "VRAM")
    import kvreg.fakes.nixl.bindings as bind

    with pytest.raises(bind.nixlBackendError):                      # past the block
        b.register_memory([(int(ptr) + (6 << 20), 4 << 20, 0, "")], "VRAM")
    assert a.add_remote_agent(b.get_agent_metadata()) == b"B"
    # the same refusal on an agent with no VRAM leaves the section empty
    c = fake.agent("C")
    with pytest.raises(bind.nixlBackendError):
        c.register_memory([(int(ptr) + (6 << 20), 4 << 20, 0, "")], "VRAM")
    with pytest.raises(bind.nixlNotFoundError):
        a.add_remote_agent(c.get_agent_metadata())
