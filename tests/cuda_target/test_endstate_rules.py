"""The end-state rules catch what symptoms miss, and pass what is right.

Each broken implementation (``impls/``) is caught on a bundled scenario by its rule and a
message a user can act on; a control scenario where the bug is harmless passes. The correct
variants (a recovering retry on granularity multiples, an optional pinning that falls back
cleanly) pass, and the report says what they recovered from.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvreg.harness.run.core import run_scenario
from kvreg.harness.run.implementation import make_implementation
from kvreg.harness.run.result import ScenarioResult
from kvreg.harness.scenario import load_file

from ..helpers.kvreg_cli import run_json

MLA = "mla/page_first_direct"
REGRESSION = "regressions/cuda_error_path_type_error"
MLA_POOL = ('[pool]\ntype = "mla"\nparams = { layout = "page_first_direct", layer_num = 61, '
            'kv_lora_rank = 512, qk_rope_head_dim = 64, dtype = "bfloat16", page_size = 64 }\n'
            'memory = "virtual"\n')


def _run(by_id, load_impl, name: str, style: str, sid: str, *,
         pinning: str | None = None) -> ScenarioResult:
    assert sid in by_id, f"bundled scenario {sid} is missing from the catalog"
    impl = load_impl(name, style)
    impl.pinning = pinning
    return run_scenario(by_id[sid], impl)


def _rules(result: ScenarioResult) -> list[str]:
    return [v.rule for v in result.violations]


def _message(result: ScenarioResult, rule: str) -> str:
    return next(v.message for v in result.violations if v.rule == rule)


# -- registered -----------------------------------------------------------------------------

def test_do_nothing_register_is_caught_by_registered(by_id, load_impl) -> None:
    result = _run(by_id, load_impl, "do_nothing", "sglang", f"{MLA}/above-limit")
    # a pageable copy is legal: the transfer step has nothing to say
    assert _rules(result) == ["registered"]
    assert result.first_violation == (
        "register() of kv_buffer returned normally but registered none of its 2675957760 "
        "bytes; copies from there run on the pageable path")


def test_do_nothing_passes_only_the_scenarios_with_nothing_to_register(
        kvreg_json, spec_of, catalog) -> None:
    rc, scenarios, _, _ = kvreg_json("-j", "2", "--impl", spec_of("do_nothing"))
    assert rc == 1
    passed = {sid for sid, s in scenarios.items() if s["verdict"] == "pass"}
    by = {s.id: s for s in catalog}
    assert passed and all(by[sid].empty or by[sid].expect == "rejected" for sid in passed)
    failed = [s for s in scenarios.values() if s["verdict"] == "fail"]
    assert len(failed) > 300
    assert all(s["violations"][0]["rule"] in ("registered", "unexpected-error")
               for s in failed), {s["violations"][0]["rule"] for s in failed}


def test_first_chunk_only_is_caught_with_the_first_gap(by_id, load_impl) -> None:
    result = _run(by_id, load_impl, "first_chunk_only", "sglang", f"{MLA}/above-limit")
    assert _rules(result) == ["registered"]
    # 238 pages of 4497408 bytes fill the first 1 GiB chunk; the rest is a gap
    assert result.first_violation == (
        "register() of kv_buffer returned normally but [kv_buffer+0x3fccc000, +1605574656) is "
        "not covered by any live registration: 1070383104 of 2675957760 bytes registered; "
        "copies from there run on the pageable path")
    control = _run(by_id, load_impl, "first_chunk_only", "sglang", f"{MLA}/below-limit")
    assert control.verdict == "pass", control.violations


def test_optional_pinning_passes_all_or_nothing_only(by_id, load_impl) -> None:
    nothing = _run(by_id, load_impl, "do_nothing", "sglang", f"{MLA}/above-limit",
                   pinning="optional")
    assert nothing.verdict == "pass", nothing.violations
    partial = _run(by_id, load_impl, "first_chunk_only", "sglang", f"{MLA}/above-limit",
                   pinning="optional")
    assert _rules(partial) == ["registered"]
    assert partial.first_violation.endswith("with pinning optional only all or nothing passes")


def test_pinning_optional_in_a_scenario_file(tmp_path: Path, load_impl) -> None:
    path = tmp_path / "mla.toml"
    path.write_text(f'format = 1\n{MLA_POOL}\n[defaults]\nchunk_gb = 1\npages = 477\n\n'
                    '[[scenario]]\nname = "optional"\npinning = "optional"\n'
                    'guards = "an optional pinning may register nothing"\n\n'
                    '[[scenario]]\nname = "required"\n'
                    'guards = "a required pinning must register every byte"\n')
    optional, required = load_file(path)
    assert (optional.pinning, required.pinning) == ("optional", "required")
    impl = load_impl("do_nothing", "sglang")
    assert run_scenario(optional, impl).verdict == "pass"
    assert _rules(run_scenario(required, impl)) == ["registered"]
    # a run-wide setting wins over the file
    impl.pinning = "optional"
    assert run_scenario(required, impl).verdict == "pass"


def test_pinning_must_be_a_known_word(tmp_path: Path) -> None:
    from kvreg.harness.scenario import ScenarioError

    path = tmp_path / "mla.toml"
    path.write_text(f'format = 1\n{MLA_POOL}\n[[scenario]]\nname = "x"\npages = 1\n'
                    'pinning = "maybe"\nguards = "an unknown pinning word is refused"\n')
    with pytest.raises(ScenarioError, match=r"pinning: expected one of \['required', "
                                            r"'optional'\]; got 'maybe'"):
        load_file(path)


# -- the vLLM-style optional pinning ------------------------------------------------------

def test_optional_fallback_that_drains_passes(by_id, load_impl) -> None:
    for sid in (f"{MLA}/fail-middle-chunk", f"{MLA}/fail-during-rollback",
                f"{MLA}/above-limit", "mla/persistent_and_transient/persistent-middle-chunk"):
        result = _run(by_id, load_impl, "optional_pinning", "generic", sid, pinning="optional")
        assert result.verdict == "pass", (sid, result.violations)
        assert result.warnings == [] or sid.endswith("fail-during-rollback"), result.warnings


def test_optional_fallback_is_swallowing_when_pinning_is_required(by_id, load_impl) -> None:
    result = _run(by_id, load_impl, "optional_pinning", "generic", f"{MLA}/fail-middle-chunk")
    assert _rules(result) == ["error-swallowed"]
    assert "register() of kv_buffer returned normally: the pool would run unpinned" in \
        result.first_violation


def test_optional_fallback_through_torch_leaves_an_error_pending(by_id, load_impl) -> None:
    result = _run(by_id, load_impl, "optional_pinning_torch", "generic",
                  f"{MLA}/fail-middle-chunk", pinning="optional")
    assert _rules(result) == ["error-pending"]
    assert result.first_violation.startswith(
        "after register returned, torch's runtime still holds cudaErrorInvalidValue (1) as "
        "its last error: the next kernel-launch check reports it against an unrelated op; a "
        "pageable fallback must leave nothing pending")


# -- seams-aligned ----------------------------------------------------------------------------

def test_seams_are_judged_without_any_copy(tmp_path: Path, load_impl) -> None:
    path = tmp_path / "mla.toml"
    path.write_text(f'format = 1\n{MLA_POOL}\n[[scenario]]\nname = "no-copy"\nchunk_gb = 1\n'
                    'pages = 595\nexercise = ["register", "teardown", "teardown"]\n'
                    'guards = "seams are judged from the registrations, not from a copy"\n')
    (sc,) = load_file(path)
    result = run_scenario(sc, load_impl("byte_offset_seams", "sglang"))
    assert _rules(result) == ["seams-aligned"]
    # the seam at 1 GiB cuts page 238 = [1070383104, 1074880512) of 4497408-byte pages
    assert result.first_violation == (
        "a seam between two registrations of kv_buffer lies at offset 1073741824 "
        "(kv_buffer+0x40000000), which cuts copy page 238 [1070383104, 1074880512) of 4497408 "
        "bytes: 3358720 bytes into it (1 more misaligned seam(s) cut a copy); the batch copy "
        "of that page spans two registrations, which fails under [UNC] docs/cuda-runtime.md "
        "§5.4: the device profile has copy_across_registrations = \"reject\"; a scenario with "
        "profile_options = { copy_across_registrations = \"allow\" } treats such a copy as "
        "pinned")
    assert run_scenario(sc, make_implementation()).verdict == "pass"


# -- error-reported ---------------------------------------------------------------------------

def test_masked_error_is_caught_by_error_reported(by_id, load_impl) -> None:
    result = _run(by_id, load_impl, "masked_error", "sglang",
                  f"{REGRESSION}/first-chunk-out-of-memory")
    # rollback already happened: nothing but the raised exception is wrong
    assert _rules(result) == ["error-reported"]
    msg = result.first_violation
    assert msg.startswith("register() of kv_buffer raised TypeError: cudaGetErrorString(): "
                          "incompatible function arguments.")
    assert "from masked_error.py:" in msg and "cudart.cudaGetErrorString(int(rc))" in msg
    assert ("instead of reporting cudaErrorMemoryAllocation (2, out of memory) returned by "
            "cudaHostRegister(kv_buffer+0x0, 1070383104) (call #1)") in msg
    control = _run(by_id, load_impl, "masked_error", "sglang", f"{MLA}/above-limit")
    assert control.verdict == "pass", control.violations


def test_an_error_without_the_code_is_named(tmp_path: Path, by_id) -> None:
    impl_file = tmp_path / "vague.py"
    impl_file.write_text(
        "def register(cudart, ptr, nbytes, *, granularity, chunk_limit):\n"
        "    if int(cudart.cudaHostRegister(ptr, min(nbytes, chunk_limit // granularity * "
        "granularity), 0)):\n"
        "        raise RuntimeError('could not pin the host pool')\n"
        "    return [(ptr, nbytes)]\n\n"
        "def teardown(cudart, ranges):\n"
        "    ranges[:] = [r for r in ranges if int(cudart.cudaHostUnregister(r[0]))]\n")
    impl = make_implementation(f"{impl_file}:register", None, "generic")
    result = run_scenario(by_id[f"{REGRESSION}/first-chunk-out-of-memory"], impl)
    assert _rules(result) == ["error-reported"]
    assert result.first_violation == (
        "register() of kv_buffer raised RuntimeError: could not pin the host pool, which does "
        "not name cudaErrorMemoryAllocation (2, out of memory) returned by "
        "cudaHostRegister(kv_buffer+0x0, 1070383104) (call #1): say the failing code, its name "
        "or its string")


def test_an_error_chained_from_the_cuda_error_is_reported(tmp_path: Path, by_id) -> None:
    impl_file = tmp_path / "chained.py"
    impl_file.write_text(
        "class CudaFailure(Exception):\n    pass\n\n"
        "def register(cudart, ptr, nbytes, *, granularity, chunk_limit):\n"
        "    rc = int(cudart.cudaHostRegister(ptr, min(nbytes, chunk_limit // granularity * "
        "granularity), 0))\n"
        "    if rc:\n"
        "        try:\n"
        "            raise CudaFailure(f'cudaErrorMemoryAllocation')\n"
        "        except CudaFailure as exc:\n"
        "            raise RuntimeError('could not pin the host pool') from exc\n"
        "    return [(ptr, nbytes)]\n\n"
        "def teardown(cudart, ranges):\n"
        "    ranges[:] = [r for r in ranges if int(cudart.cudaHostUnregister(r[0]))]\n")
    impl = make_implementation(f"{impl_file}:register", None, "generic")
    result = run_scenario(by_id[f"{REGRESSION}/first-chunk-out-of-memory"], impl)
    assert result.verdict == "pass", result.violations


def test_current_sglang_error_path_breaks_rollback_only_after_a_chunk(by_id,
                                                                      load_impl) -> None:
    first = _run(by_id, load_impl, "sglang_current_error_path", "sglang",
                 f"{REGRESSION}/first-chunk-out-of-memory")
    assert _rules(first) == ["error-reported"]
    middle = _run(by_id, load_impl, "sglang_current_error_path", "sglang",
                  f"{REGRESSION}/middle-chunk-invalid-value")
    # the exception path rolls back again: the chunk rolled back before is released twice
    assert _rules(middle) == ["unregister-not-a-live-base", "error-reported"]
    assert "which was already released (713" in middle.first_violation
    assert "instead of reporting cudaErrorInvalidValue (1, invalid argument)" in \
        middle.violations[1].message


# -- recovered, and the error-swallowed it replaces -------------------------------------------

@pytest.mark.parametrize("sid", ["mla/persistent_and_transient/transient-middle-chunk",
                                 "mla/persistent_and_transient/transient-twice",
                                 f"{MLA}/fail-middle-chunk", f"{MLA}/fail-first-chunk",
                                 "regressions/cuda_no_rollback/second-chunk-out-of-memory"])
def test_recovering_retry_passes_and_says_it_recovered(sid: str, by_id, load_impl) -> None:
    result = _run(by_id, load_impl, "recovering_retry", "sglang", sid)
    assert result.verdict == "pass", result.violations
    recovered = [w for w in result.warnings if w.rule == "recovered"]
    assert len(recovered) == 1, result.warnings
    assert "register() recovered: " in recovered[0].message
    assert "ended fully registered in" in recovered[0].message
    assert "on aligned seams" in recovered[0].message
    # through torch, the failed call's error stays pending: a warning, not a failure
    assert any(w.rule == "error-pending" for w in result.warnings)


def test_recovering_retry_gives_up_on_a_persistent_failure(by_id, load_impl) -> None:
    result = _run(by_id, load_impl, "recovering_retry", "sglang",
                  "mla/persistent_and_transient/persistent-middle-chunk")
    assert result.verdict == "pass", result.violations
    assert not any(w.rule == "recovered" for w in result.warnings)


def test_a_retry_on_byte_offsets_is_not_recovered(tmp_path: Path, by_id) -> None:
    impl_file = tmp_path / "byte_retry.py"
    impl_file.write_text(
        "def register(cudart, ptr, nbytes, *, granularity, chunk_limit):\n"
        "    chunk = chunk_limit // granularity * granularity\n"
        "    done, off = [], 0\n"
        "    while off < nbytes:\n"
        "        size = min(chunk, nbytes - off)\n"
        "        if int(cudart.cudaHostRegister(ptr + off, size, 0)):\n"
        "            size = size // 2 + 1          # not a page multiple\n"
        "            assert not int(cudart.cudaHostRegister(ptr + off, size, 0))\n"
        "        done.append((ptr + off, size))\n"
        "        off += size\n"
        "    return done\n\n"
        "def teardown(cudart, ranges):\n"
        "    ranges[:] = [r for r in ranges if int(cudart.cudaHostUnregister(r[0]))]\n")
    impl = make_implementation(f"{impl_file}:register", None, "generic")
    result = run_scenario(by_id["mla/persistent_and_transient/transient-middle-chunk"], impl)
    assert "seams-aligned" in _rules(result)
    assert "error-swallowed" not in _rules(result)
    assert not any(w.rule == "recovered" for w in result.warnings)


def test_error_swallowed_stays_for_a_pool_left_unpinned(by_id, load_impl) -> None:
    result = _run(by_id, load_impl, "errors_only_logged", "sglang", f"{MLA}/fail-middle-chunk")
    assert _rules(result) == ["error-swallowed"]      # registered says nothing more there


# -- rollback messages ----------------------------------------------------------------------

def test_no_rollback_names_what_is_left(by_id, load_impl) -> None:
    result = _run(by_id, load_impl, "no_rollback", "sglang", f"{MLA}/fail-last-chunk")
    msgs = [v.message for v in result.violations if v.rule == "not-rolled-back"]
    assert len(msgs) == 2
    assert all(m.endswith("no rollback (none of its 2 earlier chunk(s) was released; still "
                          "registered: [kv_buffer+0x0, +1070383104), [kv_buffer+0x3fccc000, "
                          "+1070383104))") for m in msgs), msgs


def test_partial_rollback_names_what_is_left(by_id, load_impl) -> None:
    result = _run(by_id, load_impl, "partial_rollback", "generic", f"{MLA}/fail-last-chunk")
    assert _rules(result) == ["not-rolled-back"]
    assert result.first_violation == (
        "chunk [kv_buffer+0x0, +1070383104) is still registered after register() of kv_buffer "
        "failed: partial rollback (released 1 of 2 earlier chunk(s); still registered: "
        "[kv_buffer+0x0, +1070383104))")
    control = _run(by_id, load_impl, "partial_rollback", "generic", f"{MLA}/fail-middle-chunk")
    assert control.verdict == "pass", control.violations


# -- a later rollback unregister -----------------------------------------------------------

def test_double_unregister_shows_only_when_a_later_rollback_unregister_fails(
        by_id, load_impl) -> None:
    later = _run(by_id, load_impl, "rollback_retry_all", "generic",
                 "mla/unregister_faults/rollback-last-unregister-fails")
    assert _rules(later)[0] == "unregister-not-a-live-base"
    assert "which was already released (713 cudaErrorHostMemoryNotRegistered)" in \
        later.first_violation
    # the first rollback unregister failing (the only fault the catalog had) hides it
    first = _run(by_id, load_impl, "rollback_retry_all", "generic", f"{MLA}/fail-during-rollback")
    assert first.verdict == "pass", first.violations


# -- the report -----------------------------------------------------------------------------

def test_cli_reports_the_new_rules_and_warnings(kvreg_json, kvreg_cli, spec_of) -> None:
    rc, scenarios, _, _ = kvreg_json("-k", "persistent_and_transient", "--impl",
                                     spec_of("recovering_retry"))
    assert rc == 0
    sid = "mla/persistent_and_transient/transient-middle-chunk"
    assert {w["rule"] for w in scenarios[sid]["warnings"]} == {"recovered", "error-pending"}
    rc, scenarios, _, _ = kvreg_json("-k", "cuda_error_path_type_error", "--impl",
                                     spec_of("masked_error"))
    assert rc == 1
    assert all(s["violations"][0]["rule"] == "error-reported" for s in scenarios.values())
    proc = kvreg_cli("run", "-k", "mla/persistent_and_transient/transient-middle",
                     "--impl", spec_of("recovering_retry"))
    assert proc.returncode == 0
    assert "    warning [recovered] cudaHostRegister(kv_buffer+0x3fccc000" in proc.stdout


def test_cli_pinning_option(kvreg_cli, spec_of) -> None:
    args = ("run", "-k", "mla/page_first_direct/above-limit", "--impl", spec_of("do_nothing"))
    assert kvreg_cli(*args).returncode == 1
    assert kvreg_cli(*args, "--pinning", "optional").returncode == 0
    bad = kvreg_cli(*args, "--pinning", "sometimes")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def test_json_always_has_warnings() -> None:
    run = run_json("-k", "mla/page_first_direct/fail-", to_file=True)
    assert run.returncode == 0
    doc = run.doc
    assert all(isinstance(s["warnings"], list) for s in doc["scenarios"])
    assert any(s["warnings"] for s in doc["scenarios"])


CLI_CASES = [
    ("do_nothing", "sglang", (), f"{MLA}/above-limit", "registered"),
    ("first_chunk_only", "sglang", (), f"{MLA}/above-limit", "registered"),
    ("masked_error", "sglang", (), f"{REGRESSION}/first-chunk-out-of-memory", "error-reported"),
    ("rollback_retry_all", "generic", (), "mla/unregister_faults/rollback-last-unregister-fails",
     "unregister-not-a-live-base"),
    ("partial_rollback", "generic", (), f"{MLA}/fail-last-chunk", "not-rolled-back"),
    ("optional_pinning_torch", "generic", ("--pinning", "optional"),
     f"{MLA}/fail-middle-chunk", "error-pending"),
    ("recovering_retry", "sglang", (), "mla/persistent_and_transient/", None),
    ("optional_pinning", "generic", ("--pinning", "optional"), f"{MLA}/fail-", None),
]


@pytest.mark.parametrize(("name", "style", "extra", "select", "rule"), CLI_CASES,
                         ids=[c[0] for c in CLI_CASES])
def test_kvreg_run_exit_code_and_json(kvreg_json, spec_of, name: str, style: str,
                                      extra: tuple[str, ...], select: str,
                                      rule: str | None) -> None:
    rc, scenarios, summary, _ = kvreg_json("-k", select, "--style", style,
                                           "--impl", spec_of(name), *extra)
    assert scenarios and summary["total"] == len(scenarios)
    if rule is None:           # a correct variant
        assert rc == 0, [s for s in scenarios.values() if s["verdict"] != "pass"]
        return
    assert rc == 1
    (s,) = scenarios.values()
    assert s["verdict"] == "fail" and rule in [v["rule"] for v in s["violations"]]


def test_an_error_left_in_cuda_bindings_fails_in_every_style(tmp_path: Path, by_id) -> None:
    """cuda-python has cudaGetLastError: an error left there could have been drained."""
    impl_file = tmp_path / "undrained.py"
    impl_file.write_text(
        "def register(cudart, ptr, nbytes, *, granularity, chunk_limit):\n"
        "    from cuda.bindings import runtime as rt\n"
        "    size = min(nbytes, chunk_limit // granularity * granularity)\n"
        "    (rc,) = rt.cudaHostRegister(ptr, size, 0)\n"
        "    if int(rc):\n"
        "        raise RuntimeError(f'cudaHostRegister failed (rc={int(rc)})')\n"
        "    return [(ptr, size)]\n\n"
        "def teardown(cudart, ranges):\n"
        "    ranges[:] = []\n")
    impl = make_implementation(f"{impl_file}:register", None, "generic")
    result = run_scenario(by_id[f"{REGRESSION}/first-chunk-out-of-memory"], impl)
    assert _rules(result) == ["error-pending"]
    assert result.first_violation == (     # register raised: said so (issue 24 §7)
        "after register raised, cuda-bindings's runtime still holds "
        "cudaErrorMemoryAllocation (2) as its last error: the next kernel-launch check reports "
        "it against an unrelated op; drain it with cudaGetLastError through the same runtime")


def test_current_sglang_error_path_over_the_whole_catalog(kvreg_json, spec_of) -> None:
    """Wherever a registration call fails, the TypeError replaces the CUDA error; where
    chunks came before it, the exception path also releases them a second time."""
    rc, scenarios, _, _ = kvreg_json("-j", "2", "--impl", spec_of("sglang_current_error_path"))
    assert rc == 1
    failed = {sid: [v["rule"] for v in s["violations"]] for sid, s in scenarios.items()
              if s["verdict"] == "fail"}
    assert failed and all("error-reported" in rules for rules in failed.values())
    assert set(failed) >= {f"{REGRESSION}/first-chunk-out-of-memory",
                           f"{REGRESSION}/middle-chunk-invalid-value"}
    assert {r for rules in failed.values() for r in rules} == {
        "error-reported", "unregister-not-a-live-base", "unexpected-error"}
    # the faithful copy with the enum-taking error path fails none of them for that reason
    rc, upstream, _, _ = kvreg_json("-k", "cuda_error_path_type_error", "--impl",
                                    spec_of("sglang_upstream"))
    assert rc == 0 and all(s["verdict"] == "pass" for s in upstream.values())
