"""A repeatable teardown is a contract the code declares (issue 24, open false cause 1).

The default exercise lists ``teardown`` twice, and kvreg used to call every implementation's
teardown twice. The real machine makes a second call only where the code's own caller does:
exllamav3's ``model_tp_cuda.py`` unregisters each region once, from ``close()`` at worker exit
(docs/real-code-trials.md §3), so a second ``cudaHostUnregister`` of the same base (713,
docs/cuda-runtime.md §3) happens only inside kvreg. SGLang promises the opposite:
``HostKVCache.destroy()`` is idempotent and ``_cuda_host_unregister`` keeps only the ranges
that failed (pool_host/base.py, pool_host/common.py; its test
``test_unregister_releases_every_registered_chunk_once`` calls it twice; docs/pools.md §1.1).
So the later rounds run only for the reference, the sglang style, a store's close() and a
teardown with ``repeatable = True``; the keep-and-retry scenarios (``contract =
"repeatable-teardown"``) skip for the rest, saying why.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from kvreg.harness.run.contract import REPEATABLE_TEARDOWN, contract_of
from kvreg.harness.run.core import run_scenario
from kvreg.harness.run.implementation import ImplementationError, make_implementation
from kvreg.harness.scenario import Scenario, ScenarioError, load_file

from ..helpers.kvreg_cli import run_json

MLA = "mla/page_first_direct"
SKIP = ("the implementation declares no repeatable-teardown contract (teardown has no "
        "repeatable = True attribute)")


def _teardown(repeatable: object = None) -> Any:
    def teardown(ranges: Any) -> None: ...
    if repeatable is not None:
        teardown.repeatable = repeatable   # type: ignore[attr-defined]
    return teardown


@pytest.mark.parametrize(("style", "attribute", "close", "repeatable", "by"), [
    ("reference", None, False, True, "style"),
    ("sglang", None, False, True, "style"),       # SGLang's destroy() is idempotent
    ("sglang", False, False, False, "attribute"),  # an adapter over code that unregisters once
    ("generic", None, False, False, "undeclared"),
    ("ctypes", None, False, False, "undeclared"),
    ("driver", True, False, True, "attribute"),
    ("ctypes", False, False, False, "attribute"),
    ("mooncake", None, False, False, "undeclared"),
    ("mooncake", None, True, True, "close"),       # a closed store's close() returns 0
])
def test_who_declares_a_repeatable_teardown(style: str, attribute: object, close: bool,
                                            repeatable: bool, by: str) -> None:
    contract = contract_of(style, None, None if close else _teardown(attribute), close=close)
    assert (contract.repeatable, contract.repeatable_by) == (repeatable, by)
    assert (contract.teardown_skip_reason() is None) == repeatable
    assert contract.scenario_skip_reason("success", None) is None
    assert (contract.scenario_skip_reason("success", REPEATABLE_TEARDOWN) is None) == repeatable
    assert contract.as_dict()["teardown"] == {"repeatable": repeatable, "known_by": by}
    assert ("; teardown repeatable (" if repeatable else "; teardown once (") in contract.text()


def test_a_wrapped_teardown_keeps_its_declaration(load_impl: Any) -> None:
    impl = load_impl("ctypes_one_call", "ctypes")
    assert impl.contract.repeatable
    # kvreg's own wrappers (call sites) use functools.wraps, which copies the attribute
    from kvreg.harness.run.callsite import CallSites
    wrapped = CallSites(impl).wrap()
    assert wrapped.teardown_fn is not impl.teardown_fn
    assert contract_of("ctypes", wrapped.register_fn, wrapped.teardown_fn).repeatable


def test_a_declaration_that_is_not_a_bool_is_refused(tmp_path: Path, kvreg_cli: Any) -> None:
    path = tmp_path / "pool.py"
    path.write_text(textwrap.dedent("""\
        def register(ptr, nbytes):
            return []
        def teardown(ranges):
            pass
        teardown.repeatable = "yes"
        """))
    with pytest.raises(ImplementationError, match="its repeatable attribute must be True or "
                       "False, not 'yes'"):
        make_implementation(f"{path}:register", None, "ctypes")
    proc = kvreg_cli("run", "--style", "ctypes", "--impl", f"{path}:register")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "must be True or False, not 'yes'" in proc.stderr


def _unregisters(result: Any) -> tuple[int, int]:
    text = result.trace_text
    return text.count("cudaHostRegister("), text.count("cudaHostUnregister(")


def test_once_only_teardown_is_called_once(load_impl: Any, by_id: dict[str, Scenario]) -> None:
    """One unregister per chunk: kvreg makes no second teardown call the code's caller
    would not make (the default exercise lists two rounds)."""
    sc = by_id[f"{MLA}/above-limit"]
    assert [s for s in sc.exercise if s.startswith("teardown")] == ["teardown", "teardown"]
    once = run_scenario(sc, load_impl("ctypes_teardown_once", "ctypes"), keep_trace=True)
    assert once.verdict == "pass", once.violations
    registers, unregisters = _unregisters(once)
    assert registers == unregisters == 3
    # the same code declared repeatable gets the second round, and fails it (713)
    twin = run_scenario(sc, load_impl("ctypes_teardown_once_claims_repeatable", "ctypes"),
                        keep_trace=True)
    assert _unregisters(twin) == (3, 6)
    assert {v.rule for v in twin.violations} == {"unregister-not-a-live-base",
                                                 "teardown-raised"}
    assert "which was already released (713 cudaErrorHostMemoryNotRegistered)" in \
        twin.first_violation
    assert any(v.message.startswith("teardown #2 of kv_buffer raised RuntimeError")
               for v in twin.violations)


def test_once_only_teardown_passes_the_catalog(spec_of: Any, catalog: list[Scenario]) -> None:
    """Every CUDA scenario passes but the keep-and-retry ones, which judge only the
    repeatable-teardown contract: skipped, saying so. kvreg's second round used to fail it
    in every scenario with a registration (292 of 582)."""
    run = run_json("-j", "2", "--style", "ctypes", "--impl", spec_of("ctypes_teardown_once"))
    rc, scenarios, summary, contract = (run.returncode, run.scenarios(), run.doc["summary"],
                                        run.doc["contract"])
    retry = {s.id for s in catalog if s.contract == REPEATABLE_TEARDOWN and s.target == "cuda"}
    assert len(retry) >= 30
    other_target = {s.id for s in catalog if s.target != "cuda"}
    skipped = {sid for sid, s in scenarios.items() if s["verdict"] == "skip"}
    assert skipped == retry | other_target
    assert all(scenarios[sid]["reason"].startswith(SKIP) for sid in retry)
    assert summary["failed"] == summary["errors"] == 0 and rc == 0
    assert summary["passed"] == len(catalog) - len(skipped)
    assert contract["teardown"] == {"repeatable": False, "known_by": "undeclared"}
    assert "; teardown once (teardown has no repeatable = True attribute): later teardown " \
        "rounds are not run, the repeatable-teardown scenarios are skipped" in contract["text"]


@pytest.mark.parametrize("name", ["fail-during-teardown", "teardown-last-unregister-fails"])
def test_a_false_declaration_is_caught_where_it_matters(name: str, load_impl: Any,
                                                        by_id: dict[str, Scenario]) -> None:
    """In the keep-and-retry scenarios the twin's second round unregisters released chunks
    again; the once-only code skips them; a correct repeatable teardown passes them."""
    sc = by_id[f"{MLA}/{name}"] if name.startswith("fail") else \
        by_id[f"mla/unregister_faults/{name}"]
    twin = run_scenario(sc, load_impl("ctypes_teardown_once_claims_repeatable", "ctypes"))
    assert twin.verdict == "fail"
    assert "unregister-not-a-live-base" in {v.rule for v in twin.violations}
    once = run_scenario(sc, load_impl("ctypes_teardown_once", "ctypes"))
    assert once.verdict == "skip" and once.reason.startswith(SKIP)
    assert run_scenario(sc, load_impl("ctypes_one_call", "ctypes")).verdict == "pass"


def test_sglang_style_keeps_its_second_round(load_impl: Any,
                                             by_id: dict[str, Scenario]) -> None:
    """SGLang's teardown promises a repeatable teardown: its broken twins are still caught
    on the second round."""
    sc = by_id[f"{MLA}/above-limit"]
    result = run_scenario(sc, load_impl("double_unregister", "sglang"))
    assert "unregister-not-a-live-base" in {v.rule for v in result.violations}
    result = run_scenario(by_id[f"{MLA}/below-limit"],
                          load_impl("teardown_not_idempotent", "sglang"))
    assert [v.rule for v in result.violations] == ["teardown-raised"]


def _scenario_file(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "s.toml"
    path.write_text(textwrap.dedent(f"""\
        format = 1
        [pool]
        type = "mla"
        params = {{ layout = "page_first_direct", layer_num = 61, kv_lora_rank = 512, \
    qk_rope_head_dim = 64, dtype = "bfloat16", page_size = 64 }}
        memory = "virtual"
        [[scenario]]
        name = "x"
        guards = "a scenario file written for the contract field test (docs/pools.md §1.1)"
        pages = 8
        {extra}
        """))
    return path


def test_scenario_contract_field(tmp_path: Path) -> None:
    ok = load_file(_scenario_file(tmp_path, 'contract = "repeatable-teardown"'))
    assert [s.contract for s in ok] == [REPEATABLE_TEARDOWN]
    assert [s.contract for s in load_file(_scenario_file(tmp_path, ""))] == [None]
    with pytest.raises(ScenarioError, match=r"contract.*'repeatable-teardown'"):
        load_file(_scenario_file(tmp_path, 'contract = "idempotent"'))
    with pytest.raises(ScenarioError, match="two teardown rounds or more"):
        load_file(_scenario_file(tmp_path, 'contract = "repeatable-teardown"\n'
                                 'exercise = ["register", "teardown"]'))


def test_a_chunk_the_only_teardown_could_not_release_is_a_warning(
        load_impl: Any, by_id: dict[str, Scenario]) -> None:
    """One registration per buffer makes no rollback call, so the rollback's unregister fault
    lands in teardown: without a repeatable teardown nothing can retry it, and the chunk stays
    pinned until exit (docs/cuda-runtime.md §3.1): a warning, not a leak. Declared
    repeatable, the same code retries it in the second round and leaves nothing."""
    sc = by_id["mla/page_first_direct/fail-during-rollback"]
    once = run_scenario(sc, load_impl("no_contract_one_call", "generic"))
    assert once.verdict == "pass", once.violations
    (warning,) = [w for w in once.warnings if w.rule == "unregister-not-retried"]
    assert "stays registered: its cudaHostUnregister in the only teardown (call #" in \
        warning.message and "returned 1 cudaErrorInvalidValue" in warning.message
    retried = run_scenario(sc, load_impl("ctypes_one_call", "ctypes"))
    assert retried.verdict == "pass", retried.violations
    assert not [w for w in retried.warnings if w.rule == "unregister-not-retried"]
    # a chunk the code lost by its own bug is still a leak
    lost = run_scenario(by_id[f"{MLA}/fail-during-teardown"],
                        load_impl("forgets_failed_chunks", "generic"))
    assert "leak" in {v.rule for v in lost.violations}
