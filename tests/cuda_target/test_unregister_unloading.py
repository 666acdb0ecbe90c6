"""Which failed unregisters leave memory pinned (docs/cuda-runtime.md §3.1): a chunk forgotten
after cudaErrorCudartUnloading costs nothing on a real machine (the runtime releases pinned
memory as it unloads: pegaflow PR #306, Mooncake PR #2945), so it is a warning; forgotten
after cudaErrorInvalidValue it stays pinned, a leak. The catalog's keep-and-retry scenarios
inject the latter."""

from __future__ import annotations

from kvreg.harness.run.core import run_scenario
from kvreg.harness.run.implementation import make_implementation
from kvreg.harness.scenario import Scenario

from ..helpers.paths import impl_spec

UNLOADING = "mha/unregister_faults/teardown-runtime-unloading"
KEEP_AND_RETRY = "mha/unregister_faults/teardown-second-unregister-fails"


def test_forgetting_a_chunk_the_runtime_keeps_pinned_is_a_leak(
        by_id: dict[str, Scenario]) -> None:
    sc = by_id[KEEP_AND_RETRY]
    (unregister,) = [f for f in sc.faults if f["point"] == "cudart.cudaHostUnregister"]
    assert unregister["error"] == "cudaErrorInvalidValue"
    result = run_scenario(sc, make_implementation(impl_spec("forgets_failed_chunks"), None,
                                                  "generic"))
    leaks = [v for v in result.violations if v.rule == "leak"]
    assert leaks and "teardown lost track of it after cudaHostUnregister failed" in \
        leaks[0].message
    assert not any(w.rule == "unregister-unloading" for w in result.warnings)


def test_forgetting_a_chunk_while_the_runtime_unloads_is_a_warning(
        by_id: dict[str, Scenario]) -> None:
    """The same code on the unloading scenario: no leak, one warning per chunk left."""
    result = run_scenario(by_id[UNLOADING], make_implementation(
        impl_spec("forgets_failed_chunks"), None, "generic"))
    assert result.verdict == "pass", result.as_dict()
    left = [w for w in result.warnings if w.rule == "unregister-unloading"]
    assert left, result.as_dict()
    assert left[0].message.startswith("chunk [kv_buffer+0x")
    assert "returned 4 cudaErrorCudartUnloading; harmless, the runtime is unloading" in \
        left[0].message
    assert sum(w.count for w in left) == 3     # 4 chunks, the first released before unloading


def test_keeping_and_retrying_while_the_runtime_unloads_passes_too(
        by_id: dict[str, Scenario]) -> None:
    """The reference keeps the chunks and retries them; every retry gets 4 again: the same
    warnings, and its second teardown is no double unregister."""
    result = run_scenario(by_id[UNLOADING], make_implementation())
    assert result.verdict == "pass", result.as_dict()
    assert {w.rule for w in result.warnings} >= {"unregister-unloading"}
    assert sum(w.count for w in result.warnings if w.rule == "unregister-unloading") == 3


def test_chunks_never_tried_after_the_runtime_said_unloading_are_no_leak(
        by_id: dict[str, Scenario]) -> None:
    """A teardown whose error path raises TypeError at the first unloading error (SGLang
    0.5.23's ``_cuda_host_unregister``) never tries the chunks after it: the process is
    exiting and they go with the runtime. Only teardown-raised, the code's own bug."""
    impl = make_implementation(impl_spec("teardown_typeerror_stops"),
                               impl_spec("teardown_typeerror_stops", "teardown"), "sglang")
    result = run_scenario(by_id[UNLOADING], impl)
    assert [v.rule for v in result.violations] == ["teardown-raised"], result.violations
    assert "raised TypeError" in result.first_violation
    left = sorted(w.message for w in result.warnings if w.rule == "unregister-unloading")
    assert len(left) == 3, result.warnings       # 4 chunks, the last released before
    never = [m for m in left if "teardown left it after cudaHostUnregister (call #6) returned "
             "4 cudaErrorCudartUnloading; harmless" in m]
    assert len(never) == 2, left
    # the broken twin's ground: the same teardown where the failure leaves chunks pinned
    kept = run_scenario(by_id[KEEP_AND_RETRY], impl)
    assert {"leak", "teardown-raised"} <= {v.rule for v in kept.violations}
    assert not any(w.rule == "unregister-unloading" for w in kept.warnings)
