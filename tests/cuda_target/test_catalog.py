"""The whole bundled catalog against kvreg's reference, faithful upstream SGLang and correct
variants: what must pass passes, and upstream fails exactly where it really would.

The three whole-catalog runs of this suite live here, one test each (so ``-n 2`` never runs
one twice); every other proof uses targeted scenarios.
"""

from __future__ import annotations

import pytest

from kvreg.harness.run.core import run_scenario
from kvreg.harness.run.implementation import make_implementation

GiB = 1 << 30

# Upstream SGLang passes no registration granularity for these layouts (docs/pools.md §2) and
# then registers the whole buffer in one call; above the 512 GiB per-call ceiling of R580+
# drivers that call fails with 2. The faithful implementation must fail exactly these.
UPSTREAM_FAILS = {
    "mha/layer_first/over-ceiling-r580",
    "mha/k_only_layer_first/over-ceiling-r580",
    "mla/layer_first/over-ceiling-r580",
    "dsa/layer_first/over-ceiling-r580",
    "mha/page_head/over-ceiling-r580",
    # the regression scenarios of that very bug (a layer-first pool in one oversized call)
    "regressions/cuda_layer_first_one_call/600gib-layer-first-r580",
    "regressions/cuda_layer_first_one_call/512gib-exactly-r580",
}


# upstream's teardown compatibility path: with the ranges attribute unset after a full
# rollback, it unregisters the released whole-buffer base again (docs/pools.md §1.1)
UPSTREAM_TEARDOWN_COMPAT = {
    "regressions/cuda_teardown_after_failed_register/teardown-after-rolled-back-register",
}


def _needs_one_oversized_call(sc) -> bool:
    """Would upstream make one call at or above the profile's per-call ceiling?"""
    from kvreg.fakes.cuda.profile import PROFILES

    ceiling = PROFILES[sc.profile].per_call_limit
    # a scenario that expects a register error takes the oversized call's failure as that
    # error (checks.py: any failed cudaHostRegister), so only the others can fail on it
    if ceiling is None or sc.empty or sc.expect in ("rejected", "register-error"):
        return False
    return any(b.cuda_registered and b.granularity is None and b.nbytes >= ceiling
               for b in sc.geometry().buffers())


def test_reference_passes_the_whole_catalog(kvreg_json, catalog) -> None:
    rc, scenarios, summary, _ = kvreg_json("-j", "2")
    assert rc == 0
    assert set(scenarios) == {s.id for s in catalog}
    assert summary["passed"] == summary["total"] == len(catalog)
    assert all(s["verdict"] == "pass" and s["violations"] == [] for s in scenarios.values())
    assert {s["pool"] for s in scenarios.values()} >= {
        "mha/layer_first", "mha_k_only/page_first", "mha_asymmetric/page_first_direct",
        "mla/page_first_direct", "dsa_indexer/page_first", "mamba/page_first",
        "deepseek_v4_paged/layer_first", "deepseek_v4_state/page_first_direct"}


def test_faithful_upstream_fails_exactly_above_the_ceiling_and_on_its_compat_teardown(
        kvreg_json, spec_of, catalog) -> None:
    rc, scenarios, summary, _ = kvreg_json("-j", "2", "--impl", spec_of("sglang_upstream"))
    assert rc == 1
    failed = {sid for sid, s in scenarios.items() if s["verdict"] == "fail"}
    assert failed == UPSTREAM_FAILS | UPSTREAM_TEARDOWN_COMPAT
    # ... the ceiling ones are exactly where upstream's algorithm makes one call >= 512 GiB
    assert failed - UPSTREAM_TEARDOWN_COMPAT == {
        s.id for s in catalog if s.target == "cuda" and _needs_one_oversized_call(s)}
    for sid in sorted(UPSTREAM_TEARDOWN_COMPAT):
        # each teardown round retries the stored base and gets 713 again: two identical
        # violations, shown once with their count
        violations = scenarios[sid]["violations"]
        assert [(v["rule"], v.get("count", 1)) for v in violations] == [
            ("unregister-not-a-live-base", 2)], violations
        for v in violations:
            assert "unregisters kv_buffer+0x0, which was already released (713" in v["message"]
    for sid in sorted(failed - UPSTREAM_TEARDOWN_COMPAT):
        (v,) = scenarios[sid]["violations"]
        assert v["rule"] == "unexpected-error", (sid, v)
        assert "512 GiB per-call ceiling of R580+ drivers; chunk it" in v["message"], v
        assert "returned 2 (out of memory)" in v["message"], v
        assert "a single call of" in v["message"]
    # the sglang style cannot register Mooncake MRs, nor express a non-GiB limit: skipped
    skipped = {s.id for s in catalog if s.target != "cuda" or s.chunk_limit % GiB}
    assert {sid for sid, s in scenarios.items() if s["verdict"] == "skip"} == skipped
    assert summary["errors"] == 0
    assert summary["passed"] == (len(catalog) - len(skipped) - len(UPSTREAM_FAILS)
                                 - len(UPSTREAM_TEARDOWN_COMPAT))


def test_half_limit_chunks_pass_the_whole_catalog(kvreg_json, spec_of, catalog) -> None:
    """A different but valid chunk size (half the limit, whole pages) is never flagged."""
    rc, scenarios, summary, _ = kvreg_json("-j", "2", "--style", "generic",
                                           "--impl", spec_of("half_limit"))
    assert rc == 0, [s for s in scenarios.values() if s["verdict"] != "pass"][:3]
    cuda = {s.id for s in catalog if s.target == "cuda"}
    assert {sid for sid, s in scenarios.items() if s["verdict"] == "pass"} == cuda
    assert summary["failed"] == summary["errors"] == 0
    assert summary["skipped"] == len(catalog) - len(cuda)


def test_forward_order_rollback_passes_every_failure_scenario(catalog) -> None:
    """Releasing the earlier chunks first-to-last is as correct as last-to-first."""
    from pathlib import Path

    impl = make_implementation(f"{Path(__file__).parent / 'impls' / 'forward_rollback.py'}"
                               ":register", None, "generic")
    chosen = [s for s in catalog if s.target == "cuda" and s.faults]
    assert len(chosen) >= 100
    results = {s.id: run_scenario(s, impl) for s in chosen}
    bad = {sid: r.violations for sid, r in results.items() if r.verdict != "pass"}
    assert bad == {}


def _load(name: str):
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parent / "impls" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"kvreg_runner_tests_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_correct_variants_really_differ_from_upstream() -> None:
    """The variants above are what they claim: forward-order rollback; half-limit chunks."""
    from kvreg.fakes.cuda.fake_cuda import FakeCuda

    MiB = 1 << 20
    fake = FakeCuda("h200-r580")
    buf = fake.virtual((10 * MiB,), "uint8", name="pool")
    fake.inject("cudaHostRegister", nth=3, error="cudaErrorMemoryAllocation")
    with pytest.raises(RuntimeError, match="rc=2"):
        _load("forward_rollback").register(fake.torch, buf.data_ptr(), 10 * MiB,
                                           granularity=MiB, chunk_limit=3 * MiB)
    regs = [int(e.args[0]) for e in fake.trace if e.api == "cudaHostRegister" and not e.code]
    unregs = [int(e.args[0]) for e in fake.trace if e.api == "cudaHostUnregister"]
    assert len(regs) == 2 and unregs == regs          # first-to-last
    assert fake.live_registrations() == []

    fake = FakeCuda("h200-r580")
    buf = fake.virtual((10 * MiB,), "uint8", name="pool")
    ranges = _load("half_limit").register(fake.torch, buf.data_ptr(), 10 * MiB,
                                          granularity=MiB, chunk_limit=5 * MiB)
    assert [size for _, size in ranges] == [2 * MiB] * 5   # floor(2.5 MiB / 1 MiB) pages


@pytest.mark.parametrize("family", ["mha/layer_first", "mha/k_only_layer_first",
                                    "mla/layer_first", "dsa/layer_first", "mha/page_head",
                                    "regressions/cuda_layer_first_one_call"])
def test_reference_in_generic_style_passes_where_upstream_passes_no_granularity(
        family: str, catalog) -> None:
    """kvreg's reference through the generic style (``kvreg.harness.cuda.reference:register``)
    chunks these layouts on page seams, where one call would break the per-call ceiling
    and byte seams would cut pages."""
    impl = make_implementation("kvreg.harness.cuda.reference:register", None, "generic")
    chosen = [s for s in catalog if s.id.startswith(family + "/")]
    assert chosen
    results = [run_scenario(s, impl) for s in chosen]
    assert [(r.id, r.violations) for r in results if r.verdict != "pass"] == []
