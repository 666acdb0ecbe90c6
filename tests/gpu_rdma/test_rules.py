"""Each gpu_rdma rule catches a broken implementation, and correct ones written differently
pass (tests/gpu_rdma/impls/; docs/gpu-rdma.md §4 gives each rule's real-machine source)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from kvreg.harness.run.core import run_scenario
from kvreg.harness.run.implementation import Implementation, make_implementation
from kvreg.harness.run.result import ScenarioResult
from kvreg.harness.scenario import Scenario, bundled_root, load_file

IMPLS = Path(__file__).parent / "impls"
ROOT = bundled_root()
CATALOG: dict[str, Scenario] = {sc.id: sc for f in sorted((ROOT / "gpu_rdma").glob("*.toml"))
                                for sc in load_file(f, ROOT)}


def impl(name: str) -> Implementation:
    return make_implementation(f"{IMPLS / name}.py:register", f"{IMPLS / name}.py:teardown",
                               "mooncake_engine")


@cache
def run(name: str, scenario_id: str) -> ScenarioResult:
    return run_scenario(CATALOG[scenario_id], impl(name) if name else make_implementation(),
                        keep_trace=True)


# (implementation, scenario, the rule it must break first, words its message must hold)
CAUGHT = [
    # SGLang's batch_register logged a failed batch at DEBUG (issue 28)
    ("sglang_debug_log", "gpu_rdma/faults/prefill-fifth-mr", "registration-failure-dropped",
     "returned -202 (ERR_CONTEXT) and register returned normally"),
    # the same code trusting a v0.3.11 batch that dropped the failure (#2869)
    ("sglang_batch_fixed", "gpu_rdma/faults/old-engine-silent-batch",
     "registration-failure-dropped", "#2869"),
    ("batch_no_rollback", "gpu_rdma/faults/decode-aux-mr", "not-rolled-back",
     "decode: register raised RuntimeError"),
    ("loop_no_rollback", "gpu_rdma/faults/prefill-fifth-mr", "not-rolled-back",
     "no rollback"),
    ("double_unregister", "gpu_rdma/mha_per_layer/one-nic", "unregister-not-a-live-base",
     "-3 (ERR_ADDRESS_NOT_REGISTERED)"),
    ("overlapping_entries", "gpu_rdma/mha_per_layer/old-engine", "batch-entry-invalid",
     "overlap"),
    ("overlapping_entries", "gpu_rdma/mha_per_layer/one-nic", "batch-entry-invalid",
     "returned -7 (ERR_ADDRESS_OVERLAPPED)"),
    ("zero_length_placeholder", "gpu_rdma/mha_per_layer/one-nic", "batch-entry-invalid",
     "a zero-length entry at 0x"),
    ("forgets_aux", "gpu_rdma/mha_per_layer/one-nic", "buffer-not-registered",
     "aux0 (aux, DRAM"),
    ("forgets_aux", "gpu_rdma/mha_per_layer/aux-and-state", "buffer-not-registered",
     "no registration call named it"),
    ("never_unregisters", "gpu_rdma/mla_latent/per-layer-blocks", "leak",
     "63 registration(s) are still in the engine"),
]


@pytest.mark.parametrize(("name", "scenario", "first", "words"), CAUGHT,
                         ids=[f"{c[0]}:{c[1].split('/', 1)[1]}" for c in CAUGHT])
def test_broken_implementation_is_caught(name: str, scenario: str, first: str,
                                         words: str) -> None:
    result = run(name, scenario)
    assert result.verdict == "fail", result.trace_text
    assert result.violations[0].rule == first, [v.as_dict() for v in result.violations]
    assert words in result.violations[0].message, result.violations[0].message


def test_a_forgotten_buffer_fails_its_transfers_too() -> None:
    # the engine's own check refuses the write (docs/mooncake-verbs.md §8.4): named at the
    # buffer no registration covered
    found = [v.message for v in run("forgets_aux", "gpu_rdma/mha_per_layer/one-nic").violations
             if v.rule == "transfer-unregistered"]
    assert [m.split(":")[0] for m in found] == [
        f"batch_transfer_sync_write of aux{i} page 0 failed (-1 (ERR_INVALID_ARGUMENT))"
        for i in (0, 1)]
    assert all("prefill's aux" in m and "no registration call of register named it" in m
               for m in found)


def test_a_silent_batch_failure_shows_in_the_transfers() -> None:
    # #2869: the region is in the map, nothing is published, the write of its page fails
    result = run("sglang_batch_fixed", "gpu_rdma/faults/old-engine-silent-batch")
    # the third MR (k0, v0, k1) failed inside the batch that returned 0
    found = [v.message for v in result.violations if v.rule == "transfer-unregistered"]
    assert len(found) == 1 and "prefill's k1+0x0 (32768 bytes)" in found[0]
    assert "batch_register_memory([k0, v0, k1, v1, ... (8 entries)]) (seq 10, returned 0 (OK))" \
        in found[0]


CORRECT = ["vllm_per_buffer", "cached_handles", "retries_once", "sglang_batch_fixed",
           "once_only_teardown", ""]
# a batch's result cannot show a failure the engine dropped (before v0.3.12, #2869)
SKIP = {("sglang_batch_fixed", "gpu_rdma/faults/old-engine-silent-batch")}


@pytest.mark.parametrize("name", CORRECT, ids=[n or "reference" for n in CORRECT])
def test_correct_implementations_pass_the_catalog(name: str) -> None:
    for scenario_id in CATALOG:
        if (name, scenario_id) in SKIP:
            continue
        result = run(name, scenario_id)
        # the nixl_* scenarios register through NIXL: the engine's style skips them, the
        # reference runs them (tests/gpu_rdma/test_nixl_style.py)
        want = "skip" if name and scenario_id.split("/")[1].startswith("nixl_") else "pass"
        if want == "pass" and name and CATALOG[scenario_id].options.get("pause_resume"):
            # these declare no release / resume hook: after the memory saver's pause their
            # MRs are invalidated and nothing registers again (tests/gpu_rdma/
            # test_memory_saver.py); the reference re-registers
            assert result.verdict == "fail"
            assert "memory saver released the KV cache" in result.violations[0].message
            continue
        assert result.verdict == want, (scenario_id, [v.as_dict() for v in
                                                      result.violations], result.reason)


def test_a_once_only_teardown_is_warned_not_failed_for_what_it_could_not_release() -> None:
    # the engine refused one unregister (an injected -1): code that declares one teardown
    # round reported it and cannot retry; a leak of code that never tried is a failure
    result = run("once_only_teardown", "gpu_rdma/faults/unregister-fails-once")
    assert result.verdict == "pass"
    assert [(w.rule, w.message.split(":")[0]) for w in result.warnings] == [
        ("unregister-not-retried", "decode")]
    assert "returned -1 (ERR_INVALID_ARGUMENT) and no later teardown" in \
        result.warnings[0].message
    assert [v.rule for v in run("never_unregisters", "gpu_rdma/faults/unregister-fails-once")
            .violations] == ["leak", "leak"]


@pytest.mark.parametrize(("scenario", "pinned"), [
    # docs/cuda-runtime.md §14.4: 224 MiB of a T4's BAR1 usable, 513 GPU pages a block: the
    # seventh block is the first MR past it
    ("gpu_rdma/gpu_memory/small-bar1", 6),
    # no nvidia-peermem, or VMM memory the peer client will not pin: the first block
    ("gpu_rdma/gpu_memory/no-peermem", 0),
    ("gpu_rdma/gpu_memory/expandable-segments", 0),
])
def test_gpu_memory_the_nic_cannot_pin_fails_at_the_engine(scenario: str, pinned: int) -> None:
    # the engine's ibv_reg_mr fails with EFAULT and register_memory returns -202
    # (ERR_CONTEXT, docs/mooncake-verbs.md §8.2); the reference raises and rolls back
    result = run("", scenario)
    assert result.verdict == "pass"
    lines = (result.trace_text or "").splitlines()
    first = next(i for i, line in enumerate(lines) if "EFAULT" in line)
    assert ".reg_mr(" in lines[first] and lines[first].endswith("-> 14 EFAULT")
    assert ".register_memory(" in lines[first + 1]
    assert lines[first + 1].endswith("-> -202 ERR_CONTEXT")
    assert sum(1 for line in lines[:first] if ".reg_mr(" in line) == pinned
    assert sum(1 for line in lines if "unregister_memory" in line) == pinned
    result = run("sglang_debug_log", scenario)
    assert result.violations[0].rule == "registration-failure-dropped"
    assert "returned -202 (ERR_CONTEXT) and register returned normally; 16 buffer(s) are " \
        "not registered" in result.violations[0].message
