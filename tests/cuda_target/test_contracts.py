"""A contract is the implementation's to declare (issue 24 §1): kvreg's contract rules judge
only the promises register's own signature makes.

``chunk-over-limit``, ``not-rejected`` and ``rejected-too-late`` judge SGLang's contract (a
chunk limit, a granularity above it refused before any call). Code that never made it (one
``cudaHostRegister`` over the whole pool, as projects without a chunk limit of their own do)
is judged against the device profile only: the real runtime accepts any single call below the
512 GiB per-call ceiling of R580+ drivers and refuses one at or above it with 2
(docs/cuda-runtime.md §2.2), and the fake does the same (fakes/cuda/cuda_driver.py). Each
correct variant is written a different way (no ``chunk_limit`` parameter, ``chunk_limit=None``,
ctypes); each broken twin still fails.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from kvreg.fakes.cuda.profile import PROFILES
from kvreg.harness.run.contract import ABSENT, DECLARED, NONE, contract_of
from kvreg.harness.run.core import run_scenario
from kvreg.harness.run.implementation import Implementation, make_implementation
from kvreg.harness.scenario import Scenario

from ..helpers.kvreg_cli import run_json

MLA = "mla/page_first_direct"
NO_CONTRACT = "the implementation declares no chunk-limit contract"


def _fn(source: str) -> Any:
    space: dict[str, Any] = {}
    exec(textwrap.dedent(source), space)
    return space["register"]


@pytest.mark.parametrize(("style", "source", "modes", "limit", "rejects"), [
    ("generic", "def register(cudart, ptr, nbytes, *, granularity, chunk_limit): ...",
     {"chunk_limit": DECLARED, "granularity": DECLARED}, True, True),
    ("generic", "def register(cudart, ptr, nbytes, *, granularity, chunk_limit=1073741824): ...",
     {"chunk_limit": DECLARED, "granularity": DECLARED}, True, True),
    ("generic", "def register(cudart, ptr, nbytes, *, granularity, chunk_limit=None): ...",
     {"chunk_limit": NONE, "granularity": DECLARED}, False, False),
    ("generic", "def register(cudart, ptr, nbytes, *, granularity): ...",
     {"chunk_limit": ABSENT, "granularity": DECLARED}, False, False),
    ("generic", "def register(cudart, ptr, nbytes, *, chunk_limit, granularity=None): ...",
     {"chunk_limit": DECLARED, "granularity": NONE}, True, False),
    ("ctypes", "def register(ptr, nbytes): ...",
     {"chunk_limit": ABSENT, "granularity": ABSENT}, False, False),
    ("driver", "def register(ptr, nbytes, **kw): ...",   # **kw may forward it: declared
     {"chunk_limit": DECLARED, "granularity": DECLARED}, True, True),
    ("mooncake", "def register(store, ptr, nbytes, *, max_mr_size=None, granularity): ...",
     {"max_mr_size": NONE, "granularity": DECLARED}, False, False),
    ("mooncake", "def register(store, ptr, nbytes, *, max_mr_size, granularity): ...",
     {"max_mr_size": DECLARED, "granularity": DECLARED}, True, True),
])
def test_the_signature_declares_the_contract(style: str, source: str, modes: dict[str, str],
                                             limit: bool, rejects: bool) -> None:
    contract = contract_of(style, _fn(source))
    assert dict(contract.modes) == modes
    assert (contract.limit, contract.rejects) == (limit, rejects)
    assert (contract.skip_reason() is None) == rejects
    # the signature as written, without annotations, names it in the report
    assert contract.signature == "register" + source[len("def register"):-len(": ...")]


def test_sglang_style_and_reference_keep_their_contracts() -> None:
    for style in ("sglang", "reference"):
        contract = contract_of(style, _fn("def register(buffer, g=None): ..."))
        assert contract.limit and contract.rejects and contract.skip_reason() is None
    sglang = contract_of("sglang", None)
    assert sglang.limit_with_granularity_only      # G None: SGLang's legacy one call
    assert sglang.text() == ("contract: chunk limit from SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB "
                             "(sglang style): each call within it where a granularity is "
                             "passed, a granularity above it refused before any call; teardown "
                             "repeatable (the sglang style): every teardown round is judged, a "
                             "later one may only retry what failed")


def test_register_gets_the_value_none_or_nothing(by_id: dict[str, Scenario]) -> None:
    seen: list[dict[str, Any]] = []

    def spy(source: str) -> Implementation:
        inner = _fn(source)

        def register(cudart: Any, ptr: int, nbytes: int, **kw: Any) -> list[tuple[int, int]]:
            seen.append(kw)
            assert int(cudart.cudaHostRegister(ptr, nbytes, 0)) == 0
            return [(ptr, nbytes)]

        def teardown(cudart: Any, ranges: list[tuple[int, int]]) -> None:
            ranges[:] = [(p, n) for p, n in ranges if int(cudart.cudaHostUnregister(p))]

        impl = Implementation("generic", "spy", register, teardown)
        impl.declared = contract_of("generic", inner)   # as inner's signature declares it
        return impl

    sc = by_id[f"{MLA}/below-limit"]           # chunk_gb = 1, G = 4497408
    for source in ("def register(cudart, ptr, nbytes, *, granularity, chunk_limit): ...",
                   "def register(cudart, ptr, nbytes, *, granularity, chunk_limit=None): ...",
                   "def register(cudart, ptr, nbytes): ..."):
        assert run_scenario(sc, spy(source)).verdict == "pass"
    assert seen == [{"granularity": 4497408, "chunk_limit": 1 << 30},
                    {"granularity": 4497408, "chunk_limit": None}, {}]


def _one_call_fails(sc: Scenario) -> bool:
    """Would one call per buffer fail in ``sc``: a buffer at or above the profile's per-call
    ceiling, where no fault already stands for the register error the scenario expects?"""
    ceiling = PROFILES[sc.profile].per_call_limit
    if ceiling is None or sc.empty or sc.expect in ("rejected", "register-error"):
        return False
    return any(b.cuda_registered and b.nbytes >= ceiling for b in sc.geometry().buffers())


@pytest.mark.parametrize(("name", "style", "one_call"), [
    ("no_contract_one_call", "generic", True),       # chunk_limit=None
    ("ctypes_one_call", "ctypes", True),             # no chunk_limit, granularity=None
    ("whole_then_chunks", "generic", False),         # no chunk_limit; chunks on error 2
])
def test_correct_code_without_a_chunk_limit_passes_the_catalog(
        name: str, style: str, one_call: bool, kvreg_json: Any, spec_of: Any,
        catalog: list[Scenario], load_impl: Any) -> None:
    """Every CUDA scenario passes but the ones that judge only the undeclared contract
    (skipped, saying so) and, for one call, those whose one call the real runtime refuses."""
    rc, scenarios, summary, _ = kvreg_json("-j", "2", "--style", style, "--impl",
                                           spec_of(name), "--teardown",
                                           spec_of(name, "teardown"))
    cuda = {s.id: s for s in catalog if s.target == "cuda"}
    rejected = {sid for sid, s in cuda.items() if s.expect == "rejected"}
    assert rejected
    # the keep-and-retry scenarios judge only the repeatable-teardown contract: run where the
    # teardown declares it (ctypes_one_call), skipped where it does not
    repeats = load_impl(name, style).contract.repeatable
    assert repeats == (name == "ctypes_one_call")
    retry = {sid for sid, s in cuda.items() if s.contract == "repeatable-teardown"}
    assert len(retry) >= 30
    skipped = {sid for sid, s in scenarios.items() if s["verdict"] == "skip"}
    assert skipped == rejected | (set() if repeats else retry) | \
        {s.id for s in catalog if s.target != "cuda"}
    for sid in rejected:
        assert scenarios[sid]["reason"].startswith(NO_CONTRACT), scenarios[sid]
    for sid in skipped & retry:
        assert scenarios[sid]["reason"].startswith(
            "the implementation declares no repeatable-teardown contract (teardown has no "
            "repeatable = True attribute)"), scenarios[sid]
    failed = {sid for sid, s in scenarios.items() if s["verdict"] == "fail"}
    ceiling = {sid for sid, s in cuda.items() if _one_call_fails(s)}
    assert len(ceiling) >= 20
    assert failed == (ceiling if one_call else set())
    for sid in failed:                      # the real runtime's refusal, named (by each rank)
        found = scenarios[sid]["violations"]
        assert len(found) == cuda[sid].ranks, found
        for v in found:
            assert v["rule"] == "unexpected-error", v
            assert "per-call ceiling of R580+ drivers; chunk it" in v["message"], v
    assert summary["errors"] == 0 and rc == (1 if one_call else 0)
    assert summary["passed"] == len(cuda) - len(rejected) - len(failed) - \
        (0 if repeats else len(retry))


def test_a_declared_contract_is_still_judged(load_impl: Any, by_id: dict[str, Scenario]
                                           ) -> None:
    """The broken twin declares chunk_limit (no default) and ignores it."""
    impl = load_impl("declared_limit_one_call", "generic")
    over = run_scenario(by_id[f"{MLA}/above-limit"], impl)
    assert [v.rule for v in over.violations] == ["chunk-over-limit"]
    assert "above the chunk limit 1073741824" in over.first_violation
    rejected = run_scenario(by_id[f"{MLA}/granularity-above-limit"], impl)
    assert {v.rule for v in rejected.violations} == {"chunk-over-limit", "not-rejected"}
    assert run_scenario(by_id[f"{MLA}/below-limit"], impl).verdict == "pass"   # control


def test_one_call_at_the_ceiling_fails_as_the_runtime_fails_it(load_impl: Any,
                                                               by_id: dict[str, Scenario]
                                                               ) -> None:
    impl = load_impl("no_contract_one_call", "generic")
    r580 = run_scenario(by_id[f"{MLA}/over-ceiling-r580"], impl)
    assert [v.rule for v in r580.violations] == ["unexpected-error"]
    assert "returned 2 (out of memory): a single call of 600.0 GiB is at or above the 512 " \
        "GiB per-call ceiling" in r580.first_violation
    # the same pool on a driver without the ceiling passes: the call, not the contract
    assert run_scenario(by_id[f"{MLA}/over-ceiling-r575"], impl).verdict == "pass"
    assert run_scenario(by_id[f"{MLA}/over-ceiling-r580"],
                        load_impl("whole_then_chunks", "generic")).verdict == "pass"


def test_rejection_scenarios_need_both_parameters(tmp_path: Path,
                                                  by_id: dict[str, Scenario]) -> None:
    path = tmp_path / "limit_only.py"
    path.write_text("def register(cudart, ptr, nbytes, *, chunk_limit, granularity=None):\n"
                    "    raise ValueError('no')\n"
                    "def teardown(cudart, ranges):\n    pass\n")
    impl = make_implementation(f"{path}:register", None, "generic")
    result = run_scenario(by_id[f"{MLA}/granularity-above-limit"], impl)
    assert result.verdict == "skip"
    assert result.reason.startswith("the implementation declares no granularity contract "
                                    "(its granularity defaults to None in register(cudart, ptr, "
                                    "nbytes, *, chunk_limit, granularity=None))")


def test_kvreg_run_says_the_contract_once(kvreg_cli: Any, spec_of: Any) -> None:
    proc = kvreg_cli("run", "--style", "generic", "--impl", spec_of("no_contract_one_call"),
                     "-k", f"{MLA}/")
    lines = proc.stdout.splitlines()
    said = [line for line in lines if line.startswith("contract: ")]
    assert said == ["contract: none declared by register(cudart, ptr, nbytes, *, granularity, "
                    "chunk_limit=None): judged against the device profile only; teardown once "
                    "(teardown has no repeatable = True attribute): later teardown rounds are "
                    "not run, the repeatable-teardown scenarios are skipped"]
    # the rejection scenario, and the keep-and-retry one of a repeatable teardown
    assert lines[-2] == said[0] and lines[-1].endswith("2 skipped")
    assert any(line.startswith(f"{MLA}/fail-during-teardown") and "SKIP" in line and
               "declares no repeatable-teardown contract" in line for line in lines)
    assert any(line.startswith(f"{MLA}/granularity-above-limit") and "SKIP" in line and
               NO_CONTRACT in line for line in lines)
    contract = run_json("-k", f"{MLA}/below-limit").doc["contract"]
    assert contract["style"] == "reference" and contract["rules"] == [
        "chunk-over-limit", "not-rejected", "rejected-too-late", "rejected-wrong-error"]
    contract = run_json("--style", "ctypes", "--impl", spec_of("ctypes_one_call"),
                        "-k", f"{MLA}/below-limit").doc["contract"]
    assert contract["keywords"] == {"chunk_limit": "absent", "granularity": "none"}
    assert contract["rules"] == [] and contract["register"] == \
        "register(ptr, nbytes, *, granularity=None)"
    assert contract["teardown"] == {"repeatable": True, "known_by": "attribute"}


def test_mooncake_none_default_keeps_the_given_limit_and_skips_the_rejection(
        tmp_path: Path) -> None:
    """A max_mr_size defaulting to None still gets the store's limit (a fact of the real
    store); the stride-above-limit scenario, which judges only the rejection, is skipped."""
    from kvreg.harness.scenario import bundled_root, load_file

    catalog = {s.name: s for s in load_file(
        bundled_root() / "mooncake" / "fastdeploy_register_buffer.toml", bundled_root())}
    path = tmp_path / "own.py"
    path.write_text(textwrap.dedent("""
        from kvreg.harness.mooncake.reference import register as ref, teardown
        SEEN = []
        def register(store, ptr, nbytes, *, max_mr_size=None, granularity):
            SEEN.append(max_mr_size)
            return ref(store, ptr, nbytes, max_mr_size=max_mr_size, granularity=granularity)
        """))
    impl = make_implementation(f"{path}:register", None, "mooncake")
    assert run_scenario(catalog["tcp-still-limited"], impl).verdict == "pass"
    seen = impl.register_fn.__globals__["SEEN"]   # type: ignore[union-attr]
    assert seen and set(seen) == {999424}
    stride = run_scenario(catalog["stride-above-limit"], impl)
    assert stride.verdict == "skip"
    assert stride.reason.startswith("the implementation declares no MR-limit contract")
    assert "an object stride above the MR limit refused before any call" in stride.reason
