"""Deliberately broken mooncake-style chunkers are caught, each by the rule it breaks, and
correct variants are not flagged (tests/mooncake_target/impls/)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from kvreg.harness.cli import main
from kvreg.harness.mooncake.styles import computes_own_mr_limit
from kvreg.harness.run.core import run_scenario
from kvreg.harness.run.implementation import Implementation, make_implementation
from kvreg.harness.run.result import ScenarioResult
from kvreg.harness.scenario import Scenario, bundled_root, load_file

IMPLS = Path(__file__).parent / "impls"
ROOT = bundled_root()
FILES = [*sorted((ROOT / "mooncake").glob("*.toml")),
         *sorted((ROOT / "regressions").glob("mooncake_*.toml"))]
# ids relative to the bundled root: mooncake/<file>/<name>, regressions/<file>/<name>
CATALOG = {sc.id: sc for f in FILES for sc in load_file(f, ROOT)}


def impl(name: str) -> Implementation:
    return make_implementation(f"{IMPLS / name}.py:register", None, "mooncake")


@cache
def run(name: str, scenario_id: str) -> ScenarioResult:
    return run_scenario(CATALOG[scenario_id], impl(name))


# (implementation, scenario, the rule it must break first)
CAUGHT = [
    ("fastdeploy_chunker", "regressions/mooncake_fastdeploy_unaligned_seams/seam-inside-block",
     "transfer-failed"),
    ("fastdeploy_chunker", "regressions/mooncake_fastdeploy_unaligned_seams/"
     "seam-inside-scale-block", "transfer-failed"),
    ("fastdeploy_chunker", "mooncake/fastdeploy_mr_limit/default-4gib", "transfer-failed"),
    ("fastdeploy_chunker", "mooncake/sglang_mla_layer_first/above-limit", "transfer-failed"),
    ("fastdeploy_chunker", "regressions/mooncake_fastdeploy_no_rollback/middle-chunk-fails",
     "not-rolled-back"),
    ("fastdeploy_chunker", "mooncake/fastdeploy_register_buffer/memlock-on-middle-chunk",
     "not-rolled-back"),
    ("fastdeploy_chunker", "mooncake/fastdeploy_register_buffer/stride-above-limit",
     "not-rejected"),
    ("fastdeploy_chunker", "mooncake/pd_transfer/chunked-on-pages", "pd-transfer-failed"),
    ("log_only", "regressions/mooncake_fastdeploy_no_rollback/error-only-logged",
     "error-swallowed"),
    ("log_only", "mooncake/hybrid_group/fail-on-side-pool", "error-swallowed"),
    ("never_unregisters", "mooncake/fastdeploy_register_buffer/below-limit", "leak"),
    ("never_unregisters", "mooncake/pd_transfer/one-mr-per-pool", "leak"),
    ("interior_unregister", "mooncake/hybrid_group/per-pool-calls",
     "unregister-not-a-live-base"),
    ("sglang_one_call", "regressions/mooncake_sglang_whole_pool_register/above-1tib-default",
     "mr-over-limit"),
    ("sglang_one_call", "regressions/mooncake_sglang_whole_pool_register/ionic-2gib",
     "mr-over-limit"),
    # computes its own limit from MC_MAX_MR_SIZE but never asks the NIC
    ("own_limit_env_only", "mooncake/own_mr_limit/own-limit-ionic-nic", "mr-over-limit"),
    ("own_limit_env_only", "mooncake/own_mr_limit/own-limit-device-max-mr-size",
     "mr-over-limit"),
    # restarts the rollback after a failed unregister: shows only on a later one
    ("retry_rollback_all", "mooncake/unregister_faults/rollback-last-unregister-fails",
     "unregister-not-a-live-base"),
    # the whole buffer first, MR-sized chunks on -600 (whole_then_chunks), each with one bug
    ("whole_then_chunks_keeps_refused", "mooncake/fastdeploy_register_buffer/"
     "above-limit-aligned", "unregister-not-a-live-base"),
    ("whole_then_chunks_swallows", "regressions/mooncake_fastdeploy_no_rollback/"
     "middle-chunk-fails", "error-swallowed"),
    ("whole_then_chunks_no_rollback", "regressions/mooncake_fastdeploy_no_rollback/"
     "middle-chunk-fails", "not-rolled-back"),
    ("whole_then_halves", "regressions/mooncake_sglang_whole_pool_register/ionic-2gib",
     "mr-over-limit"),
    # 1 GiB MRs, the middle one skipped: 4 096 MRs of a 4 TiB pool and a gap
    ("many_small_mrs_gap", "mooncake/huge/page-first-mr-seams", "registered"),
]
CORRECT = ["other_mr_size", "forward_rollback", "own_limit_fastdeploy", "whole_then_chunks",
           "many_small_mrs"]


@pytest.mark.parametrize(("name", "scenario_id", "rule"), CAUGHT,
                         ids=[f"{n}-{s.rsplit('/', 1)[1]}" for n, s, _ in CAUGHT])
def test_broken_implementation_is_caught(name: str, scenario_id: str, rule: str) -> None:
    result = run(name, scenario_id)
    assert result.verdict == "fail"
    assert result.violations[0].rule == rule, result.first_violation
    assert run_scenario(CATALOG[scenario_id], make_implementation()).verdict == "pass"


def test_unaligned_seam_names_the_block_seam_call_and_code() -> None:
    msg = run("fastdeploy_chunker",
              "regressions/mooncake_fastdeploy_unaligned_seams/seam-inside-block"
              ).first_violation
    # 1 MiB MRs over 62464-byte blocks: block 16 = [999424, 1061888) holds the seam 1048576
    assert "block 16 (key 'block16_k') of the K half of write [999424, 1061888)" in msg
    assert "cut by the MR seam at offset 1048576" in msg
    assert "batch_put_from (call #" in msg and "-800 TRANSFER_FAIL" in msg


def test_no_rollback_names_the_chunk_left_behind() -> None:
    msg = run("fastdeploy_chunker",
              "regressions/mooncake_fastdeploy_no_rollback/middle-chunk-fails").first_violation
    assert msg.startswith("MR [read+0x0, +999424) is still registered after register() of read")
    assert "-600 INVALID_PARAMS" in msg and "no rollback" in msg


def test_log_only_quotes_what_it_logged() -> None:
    msg = run("log_only", "regressions/mooncake_fastdeploy_no_rollback/error-only-logged"
              ).first_violation
    assert "returned -600 INVALID_PARAMS but register() of read returned normally" in msg
    assert "Mooncake Store Register Buffer Error: ret=-600" in msg


def test_never_unregisters_leaks_every_mr() -> None:
    result = run("never_unregisters", "mooncake/fastdeploy_register_buffer/above-limit-aligned")
    leaks = [v for v in result.violations if v.rule == "leak"]
    assert len(leaks) == 8       # 2 buffers x 4 MRs of 999424 bytes
    assert all("was never released by teardown" in v.message for v in leaks)


def test_interior_unregister_is_named_and_leaks() -> None:
    result = run("interior_unregister", "mooncake/fastdeploy_register_buffer/below-limit")
    rules = [v.rule for v in result.violations]
    assert rules.count("unregister-not-a-live-base") == 2 and rules.count("leak") == 2
    assert "which is inside an MR, not its base, returned -600 INVALID_PARAMS" in \
        result.violations[0].message


def test_one_call_above_the_limit_explains_the_release() -> None:
    result = run("sglang_one_call",
                 "regressions/mooncake_sglang_whole_pool_register/above-mc-max-mr-size")
    first, second = result.violations[:2]
    assert first.rule == "mr-over-limit" and "released Mooncake rejects it" in first.message
    assert second.rule == "unexpected-error"
    assert "RuntimeError: Mooncake memory registration failed with ret=-600" in second.message
    assert "register it in chunks" in second.message


def test_whole_then_chunks_refused_call_is_a_warning_not_a_fault() -> None:
    """Released Mooncake refuses one MR above the limit with -600 and registers nothing
    (docs/mooncake-verbs.md §1.5 step 1, §1.6): the chunks after it decide."""
    sc = CATALOG["mooncake/fastdeploy_register_buffer/above-limit-aligned"]
    result = run_scenario(sc, impl("whole_then_chunks"), keep_trace=True)
    assert result.verdict == "pass", result.violations
    line = next(ln for ln in result.trace_text.splitlines() if ln.startswith("#2 "))
    assert "register_buffer(" in line and ", 0x3d0000) -> -600 INVALID_PARAMS" in line, line
    (first, *_) = result.warnings
    assert first.rule == "recovered"
    assert "register_buffer(read+0x0, 3997696) (call #2) returned -600 INVALID_PARAMS; " \
        "register() recovered: read ended fully registered in 4 MR(s)" in first.message


def test_a_fallback_failure_is_named_not_the_refused_whole_call() -> None:
    # call #2 is the refused whole buffer, #3 the first chunk's MR, #4 the first chunk, #5
    # the injected failure of the second chunk
    sid = "regressions/mooncake_fastdeploy_no_rollback/middle-chunk-fails"
    swallowed = run("whole_then_chunks_swallows", sid).violations
    assert [v.rule for v in swallowed] == ["error-swallowed", "transfer-failed"]
    assert swallowed[0].message.startswith("register_buffer(read+0xf4000, 999424) (call #5) "
                                           "returned -600 INVALID_PARAMS but register() of "
                                           "read returned normally")
    kept = run("whole_then_chunks_no_rollback", sid).violations
    assert [v.rule for v in kept] == ["not-rolled-back"]
    assert "(register_buffer call #5 returned -600 INVALID_PARAMS): no rollback" in \
        kept[0].message
    assert run("whole_then_chunks", sid).verdict == "pass"


def test_a_fallback_still_above_the_limit_is_the_call_it_stopped_at() -> None:
    result = run("whole_then_halves",
                 "regressions/mooncake_sglang_whole_pool_register/ionic-2gib")
    over = [v for v in result.violations if v.rule == "mr-over-limit"]
    # only the half (call #3) it gave up on, not the whole buffer it went past (call #2)
    assert len(over) == 1 and over[0].message.startswith(
        "call #3 register_buffer(kv_buffer+0x0, 53685559296) asks for one MR")
    assert "register() of kv_buffer gave up there and raised" in over[0].message
    assert "(call #3) returned -600 INVALID_PARAMS: one MR of 53685559296 bytes" in \
        result.violations[1].message
    # below twice the limit the halves fit: nothing to flag
    assert run("whole_then_halves", "mooncake/fastdeploy_register_buffer/below-limit"
               ).verdict == "pass"


def test_the_refused_whole_range_kept_for_teardown_is_caught() -> None:
    result = run("whole_then_chunks_keeps_refused",
                 "mooncake/fastdeploy_register_buffer/above-limit-aligned")
    assert "unregister_buffer(write+0x0), which was already released, returned -600" in \
        result.first_violation
    assert "mr-over-limit" not in {v.rule for v in result.violations}


def test_many_small_mrs_are_judged_at_the_cost_of_their_seams() -> None:
    """A 4 TiB pool in 4 097 MRs of 1 GiB (and its PD copy on a second node) passes: the
    pages are checked against the MRs by bisect, and only those not inside one MR move
    (benchmarks/test_bench_many_mrs.py measures the cost against the same pool in 17 MRs)."""
    for name in ("page-first-mr-seams", "pd-page-first"):
        result = run("many_small_mrs", f"mooncake/huge/{name}")
        assert result.verdict == "pass", result.violations
        assert result.copy is not None and result.copy["pages_copied"] < 1000
    gap = run("many_small_mrs_gap", "mooncake/huge/page-first-mr-seams")
    # chunk 2048 of 4097 (1 GiB on whole 147456-byte pages) is never registered
    assert "[kv_buffer+0x1fffb000000, +1073700864) is not covered by any live MR" in \
        gap.first_violation
    assert "transfer-failed" in {v.rule for v in gap.violations}


@pytest.mark.parametrize("scenario_id", [
    "mooncake/fastdeploy_register_buffer/above-limit-unaligned-head",
    "mooncake/fastdeploy_mr_limit/default-4gib-head",
    "mooncake/fastdeploy_register_buffer/above-limit-aligned",
])
def test_fixed_offset_chunks_work_where_mooncake_allows_them(scenario_id: str) -> None:
    # HEAD splits slices at MR seams (#3198); aligned limits put seams between blocks
    assert run("fastdeploy_chunker", scenario_id).verdict == "pass"


def test_every_broken_implementation_is_caught_somewhere() -> None:
    caught = {name for name, _, _ in CAUGHT}
    # close_only has no teardown of its own: it runs with --teardown close
    assert caught == {p.stem for p in IMPLS.glob("*.py")} - {*CORRECT, "close_only"}


@pytest.mark.parametrize("name", CORRECT)
def test_correct_variants_pass_the_whole_catalog(name: str) -> None:
    results = {sid: run(name, sid) for sid in CATALOG}
    failed = {sid: r.first_violation for sid, r in results.items()
              if r.verdict not in ("pass", "skip")}
    assert not failed
    # those that need the limit given skip the scenarios that pass None, saying why; those
    # whose max_mr_size defaults to None declare no MR-limit contract, so the scenarios that
    # judge only its rejection of a stride above the limit skip (README, styles)
    # and those whose teardown declares no repeatable teardown skip the scenarios that judge
    # only that contract (a failed unregister retried by the next round)
    skipped = {sid for sid, r in results.items() if r.verdict == "skip"}
    own = {sid for sid, sc in CATALOG.items() if sc.options.get("limit") == "own"}
    rejected = {sid for sid, sc in CATALOG.items() if sc.expect == "rejected"}
    retry = {sid for sid, sc in CATALOG.items() if sc.contract == "repeatable-teardown"}
    assert len(retry) == 3
    computes_own = computes_own_mr_limit(impl(name))
    repeats = impl(name).contract.repeatable
    assert repeats == (name in ("other_mr_size", "forward_rollback"))
    assert skipped == (rejected if computes_own else own) | (set() if repeats else retry)
    why = ("the implementation declares no MR-limit contract" if computes_own else
           "compute its own MR limit")
    assert all(why in results[sid].reason for sid in skipped - retry)
    assert all("declares no repeatable-teardown contract" in results[sid].reason
               for sid in skipped & retry)


def test_other_mr_size_really_uses_smaller_mrs() -> None:
    # the variant differs from the reference: twice the MRs of a limit-sized chunking
    sc = CATALOG["mooncake/fastdeploy_register_buffer/above-limit-aligned"]
    ours = run_scenario(sc, make_implementation(), keep_trace=True).trace_text
    theirs = run_scenario(sc, impl("other_mr_size"), keep_trace=True).trace_text
    assert theirs.count("register_buffer(") == 2 * ours.count("register_buffer(")


def test_cli_exits_1_naming_the_straddling_block(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["run", str(ROOT / "mooncake"), "--impl",
               f"{IMPLS / 'fastdeploy_chunker.py'}:register", "--style", "mooncake"])
    out = capsys.readouterr().out
    assert rc == 1
    line = next(ln for ln in out.splitlines()
                if ln.startswith("mooncake/fastdeploy_register_buffer/above-limit-unaligned "))
    assert "FAIL" in line and "block 16 (key 'block16_k')" in line
    assert "cut by the MR seam at offset 1048576" in line


def test_scenario_catalog_is_keyed_by_id() -> None:
    assert all(isinstance(sc, Scenario) for sc in CATALOG.values())
