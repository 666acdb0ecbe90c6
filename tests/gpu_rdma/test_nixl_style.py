"""The ``nixl`` style of the gpu_rdma target: each rule, read from the fake NIXL agent,
catches a broken implementation, and correct ones written differently pass the nixl catalog
(tests/gpu_rdma/impls/nixl_*; docs/gpu-rdma.md §6 gives each reading's source)."""

from __future__ import annotations

import dataclasses
from functools import cache
from pathlib import Path

import pytest

from kvreg.fakes.nixl import FakeNixl
from kvreg.fakes.verbs import Fabric
from kvreg.harness.gpu_rdma.options import validate_options
from kvreg.harness.run.core import run_scenario
from kvreg.harness.run.implementation import Implementation, make_implementation
from kvreg.harness.run.result import ScenarioResult
from kvreg.harness.scenario import Scenario, bundled_root, load_file

IMPLS = Path(__file__).parent / "impls"
ROOT = bundled_root()
CATALOG: dict[str, Scenario] = {sc.id: sc for f in sorted((ROOT / "gpu_rdma").glob("*.toml"))
                                for sc in load_file(f, ROOT)}
NIXL = sorted(k for k in CATALOG if k.split("/")[1].startswith("nixl_"))


def impl(name: str, style: str = "nixl") -> Implementation:
    return make_implementation(f"{IMPLS / name}.py:register", f"{IMPLS / name}.py:teardown",
                               style)


@cache
def run(name: str, scenario_id: str) -> ScenarioResult:
    return run_scenario(CATALOG[scenario_id], impl(name) if name else make_implementation(),
                        keep_trace=True)


# (implementation, scenario, the rule it must break first, words its message must hold)
CAUGHT = [
    # NIXL raises instead of returning a code: the exception swallowed is the dropped failure
    ("nixl_swallows", "gpu_rdma/nixl_faults/first-register-fails",
     "registration-failure-dropped",
     "prefill: register_memory([kv0, kv1, kv2, kv3], VRAM) raised NIXL_ERR_BACKEND and "
     "register returned normally (the exception was swallowed)"),
    ("nixl_no_rollback", "gpu_rdma/nixl_faults/third-register-fails", "not-rolled-back",
     "register raised nixlNotFoundError: NIXL_ERR_NOT_FOUND with no rollback: still "
     "registered kv0, kv1"),
    ("nixl_never_deregisters", "gpu_rdma/nixl_mla/per-layer-blocks", "leak",
     "63 descriptor(s) are still registered with the agent"),
    # a second round deregisters lists released already: NOT_FOUND, nothing released
    ("nixl_double_deregister", "gpu_rdma/nixl_faults/teardown-twice",
     "unregister-not-a-live-base", "raised NIXL_ERR_NOT_FOUND: a descriptor matches no live "
     "registration"),
    # one descriptor twice in a deregistration list: the real agent dies (docs/nixl.md §3.2)
    ("nixl_dup_descriptor", "gpu_rdma/nixl_mha_per_layer/per-layer",
     "unregister-not-a-live-base", "(16 descriptors)], VRAM) names one descriptor twice: "
     "the real agent dies (SIGSEGV"),
    ("nixl_forgets_aux", "gpu_rdma/nixl_host_aux/many-aux", "buffer-not-registered",
     "prefill: aux0 (aux, DRAM, 0x"),
    # host memory registered as VRAM: UCX finds no device allocation behind it
    ("nixl_all_vram", "gpu_rdma/nixl_mha_per_layer/per-layer", "unexpected-error",
     "prefill: register raised nixlBackendError: NIXL_ERR_BACKEND after register_memory([k0, "
     "v0, k1, v1, ... (10 descriptors)], VRAM) raised NIXL_ERR_BACKEND"),
]


@pytest.mark.parametrize(("name", "scenario", "first", "words"), CAUGHT,
                         ids=[f"{c[0]}:{c[1].split('/', 1)[1]}" for c in CAUGHT])
def test_broken_nixl_implementation_is_caught(name: str, scenario: str, first: str,
                                              words: str) -> None:
    result = run(name, scenario)
    assert result.verdict == "fail", result.trace_text
    assert result.violations[0].rule == first, [v.as_dict() for v in result.violations]
    assert words in result.violations[0].message, result.violations[0].message


def test_a_teardown_the_binding_refuses_leaks_and_is_named() -> None:
    # deregister_memory takes the nixlRegDList register_memory returned, not tuples: the
    # binding's TypeError (docs/nixl.md §3), nothing released
    result = run("nixl_dereg_tuples", "gpu_rdma/nixl_mha_per_layer/kv-only")
    assert [v.rule for v in result.violations] == ["leak", "leak", "teardown-raised",
                                                   "teardown-raised"]
    assert result.violations[2].message.startswith(
        "decode: teardown round 1 raised TypeError: deregisterMem(): incompatible function "
        "arguments")


def test_a_once_only_teardown_is_warned_for_the_list_the_agent_refused() -> None:
    # the first deregister_memory (decode's VRAM list) refused once; the teardown declares one
    # round, tried every list and raised: a warning per descriptor left, not a leak
    result = run("nixl_once_only", "gpu_rdma/nixl_faults/deregister-fails-once")
    assert result.verdict == "pass"
    assert [w.message.split(" stays")[0] for w in result.warnings] == [
        f"decode: kv{i}" for i in range(4)]
    assert "its deregister_memory in the only teardown raised NIXL_ERR_BACKEND" in \
        result.warnings[0].message


def test_a_forgotten_dram_buffer_fails_at_prep_xfer_dlist() -> None:
    # NIXL's lookup (nixlMemSection::populate) finds no DRAM registration for the page
    found = [v.message for v in run("nixl_forgets_aux",
                                    "gpu_rdma/nixl_mha_per_layer/per-layer").violations
             if v.rule == "transfer-unregistered"]
    assert [m.split(":")[0] for m in found] == [
        f"the NIXL WRITE of aux{i} page 0 failed (NIXL_ERR_NOT_FOUND)" for i in (0, 1)]
    assert all("prefill's aux" in m and "no registration call of register named it" in m
               for m in found)


def _refused_at(nth: int) -> Scenario:
    """first-register-fails with the injected NIXL_ERR_BACKEND at the nth register_memory."""
    sc = CATALOG["gpu_rdma/nixl_faults/first-register-fails"]
    return dataclasses.replace(sc, faults=({**sc.faults[0], "nth": nth},))


def test_an_injected_refusal_poisons_the_metadata_as_a_backends_refusal_does() -> None:
    # prefill's VRAM list is refused by the fault plan and the failure swallowed: prefill
    # holds no VRAM, so its metadata keeps an empty VRAM section and decode cannot load it
    # (docs/nixl.md §3.3), named at the injected refusal as vram-across-mappings names UCX's
    result = run("nixl_swallows", "gpu_rdma/nixl_faults/first-register-fails")
    assert [v.rule for v in result.violations] == ["registration-failure-dropped",
                                                   "transfer-unregistered"]
    assert "metadata no longer loads in its peer" in result.violations[0].message
    assert result.violations[1].message == (
        "add_remote_agent of prefill's metadata on decode raised NIXL_ERR_NOT_FOUND, so no "
        "transfer between them can be prepared: prefill's register_memory([kv0, kv1, kv2, "
        "kv3], VRAM) raised NIXL_ERR_BACKEND (seq 0): the refused registration left an empty "
        "VRAM section in the agent's metadata, which no peer loads while the agent holds no "
        "VRAM registration (docs/nixl.md §3.3)")
    lines = (result.trace_text or "").splitlines()
    assert not any("prep_xfer_dlist" in line for line in lines)


def test_a_refusal_beside_registered_memory_of_its_kind_fails_only_the_transfers() -> None:
    # per buffer, the second (kv1) refused after kv0 registered: the VRAM section keeps
    # kv0, the metadata loads, and the WRITE of kv1 fails, named at its registration
    result = run_scenario(_refused_at(2), impl("nixl_swallows_per_buffer"), keep_trace=True)
    rules = [v.rule for v in result.violations]
    assert rules == ["registration-failure-dropped", "transfer-unregistered"], rules
    assert "no longer loads" not in result.violations[0].message
    assert result.violations[1].message.startswith(
        "the NIXL WRITE of kv1 page 0 failed (NIXL_ERR_NOT_FOUND): prefill's kv1+0x0")
    assert "register_memory([kv1], VRAM) (seq 1) named it and raised NIXL_ERR_BACKEND" in \
        result.violations[1].message


def test_a_swallowed_failure_no_backend_took_names_the_call_at_the_transfer() -> None:
    # NIXL_ERR_NOT_FOUND is raised before any backend takes the list: no section, decode's
    # metadata loads, and each latent's WRITE fails at decode (18 KiB pages: 16 x 576 x bf16)
    result = run("nixl_swallows", "gpu_rdma/nixl_faults/third-register-fails")
    found = [v.message for v in result.violations if v.rule == "transfer-unregistered"]
    assert len(found) == 4
    assert "decode's kv0+0x0 (18432 bytes) is in no registered descriptor; register_memory(" \
        "[kv0, kv1, kv2, kv3], VRAM) (seq 2) named it and raised NIXL_ERR_NOT_FOUND" in found[0]
    assert "no longer loads" not in result.violations[0].message


def test_correct_implementations_pass_a_refusal_at_any_registration() -> None:
    # raising and rolling back leaves no section behind that poisons anything
    for name in ("nixl_per_kind", "nixl_per_buffer", "nixl_per_group"):
        for nth in (1, 2, 3):
            result = run_scenario(_refused_at(nth), impl(name))
            assert result.verdict == "pass", (name, nth, [v.as_dict() for v in
                                                          result.violations])


def test_a_refused_vram_registration_poisons_the_agents_metadata() -> None:
    # the backend refused the VRAM list (the tensors cross VMM mappings): the agent holds
    # no VRAM, so its metadata fails to load in the peer (NOT_FOUND) and nothing can be
    # prepared (docs/nixl.md §3.3)
    result = run("nixl_swallows", "gpu_rdma/nixl_faults/vram-across-mappings")
    rules = [v.rule for v in result.violations]
    assert rules == ["registration-failure-dropped", "registration-failure-dropped",
                     "transfer-unregistered", "transfer-unregistered"], rules
    assert "metadata no longer loads in its peer" in result.violations[0].message
    md = result.violations[2].message
    assert md.startswith("add_remote_agent of decode's metadata on prefill raised "
                         "NIXL_ERR_NOT_FOUND")
    assert "the refused registration left an empty VRAM section" in md
    lines = (result.trace_text or "").splitlines()
    assert not any("prep_xfer_dlist" in line for line in lines)


CORRECT = ["nixl_per_kind", "nixl_per_group", "nixl_per_buffer", "nixl_cached_descs",
           "nixl_once_only", ""]


@pytest.mark.parametrize("name", CORRECT, ids=[n or "reference" for n in CORRECT])
def test_correct_nixl_implementations_pass_the_nixl_catalog(name: str) -> None:
    for scenario_id in NIXL:
        result = run(name, scenario_id)
        if name and CATALOG[scenario_id].options.get("pause_resume"):
            # no release / resume hook: the memory saver's pause leaves their VRAM
            # registrations over released memory (tests/gpu_rdma/test_memory_saver.py)
            assert result.verdict == "fail"
            assert "memory saver released the KV cache" in result.violations[0].message
            continue
        assert result.verdict == "pass", (scenario_id, [v.as_dict() for v in
                                                        result.violations], result.reason)


def test_the_reference_registers_one_list_per_group_and_writes_every_buffer() -> None:
    result = run("", "gpu_rdma/nixl_mha_per_layer/aux-and-state")
    lines = (result.trace_text or "").splitlines()
    regs = [line.split(".register_memory(")[0].split()[-1] + line[-25:]
            for line in lines if ".register_memory(" in line]
    # kv (VRAM), aux (DRAM), state (VRAM) on each node
    assert len(regs) == 6 and all(r.endswith("-> 0 OK") for r in regs)
    assert [line.rsplit("'", 2)[-2] for line in lines if ".register_memory(" in line] == \
        ["VRAM_SEG", "DRAM_SEG", "VRAM_SEG"] * 2
    # one prepared WRITE per buffer: 4 layers' K and V, 2 aux, 2 state
    assert sum(".make_prepped_xfer('WRITE'" in line for line in lines) == 12
    assert sum(".transfer(" in line for line in lines) == 12


def test_a_style_runs_only_its_transport() -> None:
    nixl_sc, engine_sc = "gpu_rdma/nixl_mha_per_layer/per-layer", "gpu_rdma/faults/" \
        "prefill-fifth-mr"
    skipped = run_scenario(CATALOG[nixl_sc], impl("vllm_per_buffer", "mooncake_engine"))
    assert skipped.verdict == "skip" and "use --style nixl" in skipped.reason
    skipped = run_scenario(CATALOG[engine_sc], impl("nixl_per_kind"))
    assert skipped.verdict == "skip" and "use --style mooncake_engine" in skipped.reason


def test_the_transport_option_is_checked() -> None:
    assert validate_options({"transport": "ucx"}) == [
        "transport = one of ['mooncake', 'nixl'] (got 'ucx')"]
    assert validate_options({"transport": "nixl"}) == []
    # the engine's own options mean nothing over NIXL: said, not ignored
    assert validate_options({"transport": "nixl", "engine": "v0.3.11",
                             "nics": {"mlx5_0": "mlx5"}}) == [
        "nics applies to transport = 'mooncake' only (UCX chooses the NICs under NIXL)",
        "engine applies to transport = 'mooncake' only"]


def test_fakes_on_one_fabric_with_peers_move_dram_between_nodes() -> None:
    # two nodes' FakeNixl (fakes/nixl/fake.py ``peers``): a WRITE lands in the peer node's
    # memory, not in the writer's
    import ctypes

    fabric = Fabric(())
    a = FakeNixl("ucx-host", fabric=fabric, node="a")
    b = FakeNixl("ucx-host", fabric=fabric, node="b", peers=a)
    src, dst = ctypes.create_string_buffer(b"kvreg!!!", 8), ctypes.create_string_buffer(8)
    pa, pb = a.agent("pa"), b.agent("pb")
    sa, sb = ctypes.addressof(src), ctypes.addressof(dst)
    a.track(src, name="src")
    b.track(dst, name="dst")
    pa.register_memory([(sa, 8, 0, "")], "DRAM")
    pb.register_memory([(sb, 8, 0, "")], "DRAM")
    pa.add_remote_agent(pb.get_agent_metadata())
    lh = pa.prep_xfer_dlist("NIXL_INIT_AGENT", [(sa, 8, 0)], "DRAM")
    rh = pa.prep_xfer_dlist("pb", [(sb, 8, 0)], "DRAM")
    xfer = pa.make_prepped_xfer("WRITE", lh, [0], rh, [0])
    state = pa.transfer(xfer)
    while state == "PROC":
        state = pa.check_xfer_state(xfer)
    assert state == "DONE" and dst.raw == b"kvreg!!!"
    with pytest.raises(ValueError, match="share this fake's fabric"):
        FakeNixl(fabric=Fabric(()), node="c", peers=a)
