"""One model: ``seams-aligned`` never contradicts kvreg's own transfers.

Over every CUDA scenario of the catalog, for kvreg's reference and for implementations that
put seams elsewhere (SGLang's merged algorithm, the pre-#36798 byte-offset seams, PR #39744's
halving down to 4 KiB, a retry on granularity multiples), each run is repeated with the
transfers step in (copying every page extent through ``cudaMemcpyBatchAsync``), and:

- a ``seams-aligned`` violation on the batch path exists exactly where that copy fails with a
  page spanning two registrations (docs/pools.md §5.1-§5.2, docs/cuda-runtime.md §5.4);
- any other ``seams-aligned`` violation names the copy path kvreg does not model (the direct
  layer_first run, ``transfer_kv_direct``) and the [UNC] profile option it rests on;
- with ``copy_across_registrations = "allow"`` neither fails: the option decides both.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from kvreg.harness.run.core import run_scenario
from kvreg.harness.run.implementation import Implementation, make_implementation
from kvreg.harness.run.isolation import capture_logs
from kvreg.harness.run.result import CallBudgetExceeded, Violation
from kvreg.harness.run.target import SkipScenario
from kvreg.harness.run.targets import get_target
from kvreg.harness.scenario import Scenario, ScenarioError, load_file

from ..helpers.paths import CUDA_IMPLS

BATCH = "the batch copy of that page spans two registrations"
RUN = ("io_backend \"direct\" copies runs of consecutive pages of a layer with one "
       "cudaMemcpyAsync (transfer_kv_direct, docs/pools.md §5.2)")
UNC = ('[UNC] docs/cuda-runtime.md §5.4: the device profile has copy_across_registrations = '
       '"reject"; a scenario with profile_options = { copy_across_registrations = "allow" }')
IMPLEMENTATIONS = ("reference", "sglang_upstream", "byte_offset_seams",
                   "sglang_pr39744_halving", "recovering_retry")


def _impl(name: str) -> Implementation:
    if name == "reference":
        return make_implementation()
    path = CUDA_IMPLS / f"{name}.py"
    return make_implementation(f"{path}:register", f"{path}:teardown", "sglang")


def _with_transfers(sc: Scenario, **changes: object) -> Scenario:
    steps = sc.exercise if "transfers" in sc.exercise else \
        (sc.exercise[0], "transfers", *sc.exercise[1:])
    return dataclasses.replace(sc, exercise=steps, **changes)  # type: ignore[arg-type]


def _spanning(violations: list[Violation]) -> bool:
    return any(v.rule == "transfer-failed" and "spans registrations" in v.message
               for v in violations)


def _judged_with_copies(sc: Scenario, impl: Implementation) -> list[Violation] | None:
    """The run's violations with every page copied over the registrations register left,
    also where a later buffer's register raised (the pages of the buffers that returned are
    what a pool would copy). None when the scenario is skipped or spends its call budget."""
    try:
        world = get_target(sc.target).build(sc, impl, "fake")
    except SkipScenario:
        return None
    try:
        with world.isolation(), capture_logs() as logs:
            world.set_logs(logs)
            world.register(impl)
            world.transfer()
    except CallBudgetExceeded:
        return None
    world.finish()
    return world.judge()


@pytest.mark.parametrize("name", IMPLEMENTATIONS)
def test_seams_aligned_agrees_with_the_transfers(name: str, catalog) -> None:  # type: ignore[no-untyped-def]
    impl = _impl(name)
    seen = {"batch": 0, "run": 0, "transfer": 0}
    for sc in catalog:
        if sc.target != "cuda" or sc.empty or sc.ranks > 1:
            continue     # (a many-rank scenario's worlds are its ranks': tests/ranked)
        result = run_scenario(_with_transfers(sc), impl)
        if result.verdict == "skip":
            continue
        seams = [v.message for v in result.violations if v.rule == "seams-aligned"]
        spanning = _spanning(result.violations)
        if result.copy is None and seams:   # a later register raised: copy all the same
            copied = _judged_with_copies(sc, impl)
            assert copied is not None, sc.id
            spanning = _spanning(copied)
            assert seams == [v.message for v in copied if v.rule == "seams-aligned"]
        for msg in seams:
            assert (BATCH in msg) != (RUN in msg), (sc.id, msg)
            assert UNC in msg, (sc.id, msg)
        batch = any(BATCH in m for m in seams)
        seen["batch"] += batch
        seen["run"] += any(RUN in m for m in seams)
        seen["transfer"] += spanning
        # the copies fail on a spanning page exactly where a seam cuts a page the batch copy
        # sends; a page above the chunk limit (expect "rejected") has no seam unit to judge,
        # so there only the first half holds
        if sc.expect == "rejected":
            assert spanning or not batch, (sc.id, result.violations)
        else:
            assert batch == spanning, (sc.id, result.violations)
    if name in ("byte_offset_seams", "sglang_pr39744_halving"):
        assert seen["batch"] and seen["transfer"], seen
    if name == "sglang_pr39744_halving":
        assert seen["run"], seen
    if name in ("reference", "recovering_retry"):
        assert seen == {"batch": 0, "run": 0, "transfer": 0}


@pytest.mark.parametrize("sid", [
    "mha/layer_first/above-limit", "mla/page_first/fail-last-chunk",
    "regressions/cuda_layer_first_one_call/600gib-layer-first-r580"])
def test_the_unc_option_decides_both_paths(sid: str, by_id) -> None:  # type: ignore[no-untyped-def]
    """With copy_across_registrations = "allow" a seam that cuts a copy is a warning (naming
    the option), and the batch copy of a spanning page succeeds."""
    impl = _impl("sglang_pr39744_halving")
    reject = run_scenario(_with_transfers(by_id[sid]), impl)
    assert "seams-aligned" in [v.rule for v in reject.violations]
    allow = run_scenario(_with_transfers(
        by_id[sid], profile_options={"copy_across_registrations": "allow"}), impl)
    assert allow.verdict == "pass", allow.violations
    (warning,) = [w for w in allow.warnings if w.rule == "seams-aligned"]
    assert warning.message.endswith('the device profile has copy_across_registrations = '
                                    '"allow" ([UNC] docs/cuda-runtime.md §5.4), so the copy '
                                    'is treated as pinned')


def test_a_seam_in_the_dsa_spare_page_cuts_no_copy(by_id) -> None:  # type: ignore[no-untyped-def]
    """The DSA indexer allocates (S + P + 1) // P rows but host indices stay below S, so its
    last row is never addressed (sglang 0.5.23 pool_host/dsa.py ``indexer_page_num``,
    base.py ``free_slots = arange(logical_size)``; docs/pools.md §2.5). PR #39744's halving
    of the failing last chunk (that row alone) puts a seam inside it: no copy crosses it."""
    sc = by_id["dsa/page_first/fail-last-chunk"]
    geometry = sc.geometry()
    (spec,) = geometry.buffers()
    assert spec.shape[0] == geometry.page_count + 1 == 4167
    spare = spec.regions[-1]
    assert (spare.name, spare.copied, spare.nbytes) == ("spare pages", False, 515328)
    assert len(geometry.page_extents()) == 4166
    result = run_scenario(sc, _impl("sglang_pr39744_halving"))
    assert result.verdict == "pass", result.violations
    assert result.copy is not None and result.copy["pages_copied"] == 4166
    assert [w.rule for w in result.warnings] == ["recovered", "error-pending"]   # torch's
    assert result.warnings[0].message.endswith("on seams no copy crosses")
    # the same halving inside a page that is copied fails, on both paths of the model
    mla = run_scenario(by_id["mla/page_first/fail-last-chunk"], _impl("sglang_pr39744_halving"))
    assert [v.rule for v in mla.violations] == ["transfer-failed", "seams-aligned"]
    assert "which cuts copy page 476 [2140766208, 2145263616)" in mla.violations[1].message


def test_a_layer_first_seam_between_pages_names_the_direct_path(by_id) -> None:  # type: ignore[no-untyped-def]
    """A seam between two pages of a layer slab: every page extent copies fine; only a
    direct-path run across it spans two registrations, an [UNC] failure (docs/cuda-runtime.md
    §5.4) that the message attributes to the profile option."""
    result = run_scenario(by_id["mha/layer_first/above-limit"],
                          _impl("sglang_pr39744_halving"))
    assert [v.rule for v in result.violations] == ["seams-aligned"]
    assert result.copy is not None
    assert result.copy["pages_copied"] == result.copy["pages_total"] == 20376
    msg = result.first_violation
    assert msg.startswith(
        "a seam between two registrations of kv_buffer lies at offset 1073741824 "
        "(kv_buffer+0x40000000), between two pages of copy unit 28 [1038614528, 1075707904) "
        "(K layer 28) of 37093376 bytes, 35127296 bytes into it (1 more misaligned seam(s) "
        "cut a copy); kvreg copies each page apart")
    assert RUN in msg and UNC in msg


@pytest.mark.parametrize(("options", "words"), [
    ('{ copy_across_registrations = "maybe" }',
     "profile option copy_across_registrations must be one of 'reject', 'allow'; got 'maybe'"),
    ("{ per_call_limit = 1 }", "unknown [UNC] profile option 'per_call_limit'"),
    ('"allow"', "a table of [UNC] profile options"),
])
def test_profile_options_are_checked(tmp_path: Path, options: str, words: str) -> None:
    path = tmp_path / "mla.toml"
    path.write_text(
        'format = 1\n[pool]\ntype = "mla"\nparams = { layout = "page_first", layer_num = 61, '
        'kv_lora_rank = 512, qk_rope_head_dim = 64, dtype = "bfloat16", page_size = 64 }\n'
        f'[[scenario]]\nname = "x"\npages = 1\nprofile_options = {options}\n'
        'guards = "an unknown [UNC] option is refused"\n')
    with pytest.raises(ScenarioError, match=re.escape(words)):
        load_file(path)


def test_profile_options_reach_the_fake(tmp_path: Path) -> None:
    path = tmp_path / "mla.toml"
    path.write_text(
        'format = 1\n[pool]\ntype = "mla"\nparams = { layout = "page_first", layer_num = 61, '
        'kv_lora_rank = 512, qk_rope_head_dim = 64, dtype = "bfloat16", page_size = 64 }\n'
        '[[scenario]]\nname = "x"\npages = 1\n'
        'profile_options = { copy_across_registrations = "allow" }\n'
        'guards = "the option switches the fake\'s copy rule"\n')
    (sc,) = load_file(path)
    world = get_target("cuda").build(sc, make_implementation(), "fake")
    assert world.fake.profile.copy_across_registrations == "allow"
    assert world.record.copy_across == "allow"


MOONCAKE_IMPLS = ("fastdeploy_chunker", "other_mr_size", "sglang_one_call",
                  "retry_rollback_all", "reference")


@pytest.mark.parametrize("name", MOONCAKE_IMPLS)
def test_mr_seams_agree_with_the_store_transfers(name: str, catalog) -> None:  # type: ignore[no-untyped-def]
    """On the Mooncake target a seams-aligned violation of a run whose pages were put and
    read back comes with the transfer failure of the object that MR seam cuts (§1.7)."""
    root = Path(__file__).resolve().parents[1] / "mooncake_target" / "impls"
    impl = make_implementation() if name == "reference" else make_implementation(
        f"{root / name}.py:register", f"{root / name}.py:teardown", "mooncake")
    judged = 0
    for sc in catalog:
        if sc.target != "mooncake":
            continue
        result = run_scenario(sc, impl)
        seams = [v for v in result.violations if v.rule == "seams-aligned"]
        if not seams or result.copy is None:    # no seam, or a register raised: no I/O
            continue
        judged += 1
        assert any(v.rule != "seams-aligned" and "cut by the MR seam" in v.message
                   for v in result.violations), (sc.id, result.violations)
    assert judged > 0 if name == "fastdeploy_chunker" else judged == 0


def test_only_bytes_no_page_extent_touches_are_marked_uncopied(catalog) -> None:  # type: ignore[no-untyped-def]
    """Over every pool of the catalog: a region marked uncopied holds no page extent (so the
    rule that ignores it hides no copy), and only the DSA indexer has such rows (docs/pools.md
    §2.5: every other pool addresses all the pages it allocates)."""
    seen: set[str] = set()
    for sc in catalog:
        if sc.pool in seen or "huge" in sc.tags:
            continue
        seen.add(sc.pool)
        geometry = sc.geometry()
        for i, spec in enumerate(geometry.buffers()):
            uncopied = [r for r in spec.regions if not r.copied]
            assert not uncopied or sc.pool_type in ("dsa_indexer", "group"), sc.pool
            if not uncopied or not geometry.has_page_meta:
                continue
            ext = geometry.page_extents()
            mine = ext.buffer == i
            for r in uncopied:
                hit = (ext.offset[mine] < r.end) & (ext.end[mine] > r.offset)
                assert not hit.any(), (sc.pool, spec.name, r)
    assert {"dsa_indexer/page_first", "dsa_indexer/layer_first"} <= seen
