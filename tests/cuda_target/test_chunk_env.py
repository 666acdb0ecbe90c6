"""The chunk-limit variable as deployments leave it: unset, empty, or 0 (issue 24 §5).

``chunk_gb = "unset"``, ``""`` and ``0`` set SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB so, and the
limit kvreg judges by is what SGLang 0.5.23 makes of it: EnvInt(256) in srt/environ.py
(EnvField.get: unset -> the default; a value int() cannot parse, "" among them -> a warning and
the default) and max(value, 1) * 1024**3 in pool_host/common.py ``_cuda_host_register``. So
unset and "" are 256 GiB and 0 is 1 GiB.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kvreg.harness.cuda.options import ENV_CHUNK_GB, chunk_env
from kvreg.harness.cuda.target import TARGET
from kvreg.harness.run.core import run_scenario
from kvreg.harness.run.implementation import make_implementation
from kvreg.harness.scenario import Scenario, load_file

GiB = 1 << 30
FAMILY = "mla/chunk_env"
IMPLS = Path(__file__).parent / "impls"


@pytest.fixture(scope="module")
def scenarios() -> dict[str, Scenario]:
    from kvreg.harness.scenario import bundled_root

    root = bundled_root()
    return {s.name: s for s in load_file(root / "mla" / "chunk_env.toml", root)}


@pytest.mark.parametrize(("name", "value", "limit"), [
    ("unset-default-256gib", None, 256 * GiB),
    ("empty-default-256gib", "", 256 * GiB),
    ("zero-floors-to-1gib", "0", GiB),
    ("unset-over-ceiling-r580", None, 256 * GiB),
])
def test_the_key_sets_the_variable_and_sglangs_limit(scenarios: dict[str, Scenario], name: str,
                                                     value: str | None, limit: int) -> None:
    sc = scenarios[name]
    assert sc.chunk_limit == limit
    assert chunk_env(sc) == value
    # the worker process of the scenario is configured with that value (None: unset)
    assert TARGET.process_config(sc).env == ((ENV_CHUNK_GB, value),)


def test_a_whole_gib_limit_still_sets_its_value(tmp_path: Path) -> None:
    path = tmp_path / "gb.toml"
    path.write_text('format = 1\n[pool]\ntype = "mla"\nparams = { layout = "page_first", '
                    'layer_num = 2, kv_lora_rank = 512, qk_rope_head_dim = 64, dtype = '
                    '"bfloat16", page_size = 64 }\n[defaults]\nchunk_gb = "unset"\n'
                    '[[scenario]]\nname = "two"\nguards = "a scenario value wins over the '
                    'defaults"\npages = 4\nchunk_gb = 2\n[[scenario]]\nname = "inherit"\n'
                    'guards = "the defaults apply"\npages = 4\n')
    two, inherit = load_file(path)
    assert (two.chunk_limit, chunk_env(two)) == (2 * GiB, "2")
    assert (inherit.chunk_limit, chunk_env(inherit)) == (256 * GiB, None)


@pytest.mark.parametrize("impl", [None, "kvreg.harness.cuda.reference:register_buffer",
                                  f"{IMPLS / 'sglang_upstream.py'}:register"],
                         ids=["reference", "reference-sglang-style", "sglang-upstream"])
def test_correct_code_passes_every_chunk_env_scenario(scenarios: dict[str, Scenario],
                                                      impl: str | None) -> None:
    teardown = None if impl is None or "upstream" in impl else \
        "kvreg.harness.cuda.reference:teardown_buffer"
    implementation = make_implementation(impl, teardown, None if impl is None else "sglang")
    results = {name: run_scenario(sc, implementation) for name, sc in scenarios.items()}
    assert {n: r.violations for n, r in results.items() if r.verdict != "pass"} == {}


@pytest.mark.parametrize(("function", "name", "rule", "words"), [
    ("register_unparsed", "empty-default-256gib", "unexpected-error",
     "ValueError: invalid literal for int() with base 10: ''"),
    ("register_unparsed", "zero-floors-to-1gib", "unexpected-error",
     "granularity 4497408 exceeds the chunk limit 0"),
    ("register_unset_unlimited", "unset-default-256gib", "chunk-over-limit",
     "above the chunk limit 274877906944"),
    # its one 600 GiB call is refused at the per-call ceiling: it registered nothing, so no
    # chunk limit was broken (a refused call is judged by its results), and the raise that
    # follows is the failure
    ("register_unset_unlimited", "unset-over-ceiling-r580", "unexpected-error",
     "at or above the 512 GiB per-call ceiling of R580+ drivers; chunk it"),
])
def test_a_reader_that_breaks_on_the_deployed_value_is_caught(
        scenarios: dict[str, Scenario], function: str, name: str, rule: str,
        words: str) -> None:
    impl = make_implementation(f"{IMPLS / 'chunk_env_readers.py'}:{function}", None, "sglang")
    result = run_scenario(scenarios[name], impl)
    assert result.verdict == "fail"
    assert result.violations[0].rule == rule, result.violations
    assert words in result.first_violation
    # the control: the value it reads right passes
    control = "unset-default-256gib" if function == "register_unparsed" else \
        "zero-floors-to-1gib"
    assert run_scenario(scenarios[control], impl).verdict == "pass"


def test_the_ceiling_refusal_is_named_for_unset_read_as_no_limit(
        scenarios: dict[str, Scenario]) -> None:
    impl = make_implementation(f"{IMPLS / 'chunk_env_readers.py'}:register_unset_unlimited",
                               None, "sglang")
    result = run_scenario(scenarios["unset-over-ceiling-r580"], impl)
    error = next(v for v in result.violations if v.rule == "unexpected-error")
    assert "returned 2 (out of memory): a single call of 600.0 GiB is at or above the 512 " \
        "GiB per-call ceiling" in error.message


def test_kvreg_run_sets_unset_empty_and_zero_in_the_worker(kvreg_json: Any) -> None:
    """Through the supervised workers: the variable really is absent, empty or "0" there. The
    faithful upstream copy reads it as SGLang does and passes every one; the unparsed reader
    fails exactly where it is "" or "0" (it reads unset as its default 256)."""
    rc, by_id, summary, _ = kvreg_json("-k", FAMILY, "--impl",
                                       f"{IMPLS / 'sglang_upstream.py'}:register")
    assert rc == 0 and summary["passed"] == 5, by_id
    rc, by_id, _, _ = kvreg_json("-k", FAMILY, "--impl",
                                 f"{IMPLS / 'chunk_env_readers.py'}:register_unparsed")
    failed = {sid.rsplit("/", 1)[1] for sid, s in by_id.items() if s["verdict"] == "fail"}
    assert rc == 1 and failed == {"empty-default-256gib", "zero-floors-to-1gib",
                                  "zero-second-chunk-fails"}
