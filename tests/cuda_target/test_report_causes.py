"""Reports a user acts on: root causes with ``path:line``, whole deduplicated messages,
hints said once, call numbers that match fault plans' ``nth``.

The implementations are the bundled broken ones (``impls/``) and the faithful copy of
SGLang's current error path (``sglang_current_error_path``: ``cudaGetErrorString(int(rc))``,
spec/cuda-runtime.md §7). ``where`` is measured in the worker process that ran the code
(``kvreg run`` with workers), so these tests run the CLI.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from kvreg.harness.run.causes import causes, dedupe, hints
from kvreg.harness.run.result import ScenarioResult, Violation, whole_message

from ..helpers.kvreg_cli import run_json, run_kvreg
from ..helpers.paths import CUDA_IMPLS, impl_spec

MLA = "mla/page_first_direct"
HEAD = re.compile(r" +(\d+) scenario\(s\)  \[([a-z-]+)\]  (.+?):(\d+): (.+)")


def _source(path: str, line: int) -> str:
    return Path(path).read_text().splitlines()[line - 1].strip()


def _run(*args: str) -> tuple[dict[str, Any], list[str]]:
    """``kvreg run -j 2 ARGS --json FILE``: the report (the file) and the table (stdout) of
    one run."""
    run = run_json("-j", "2", *args, to_file=True)
    run.scenarios()           # every failing scenario appears under at least one cause
    return run.doc, run.stdout.splitlines()


def test_sglang_error_path_leads_with_the_line_to_fix() -> None:
    """SGLang's current error path: the first cause is error-reported at line 50 of the
    file, the `cudaGetErrorString(int(rc))` call, with the count of every scenario that
    broke that rule there; the table's first lines say the same."""
    path = str(CUDA_IMPLS / "sglang_current_error_path.py")
    doc, lines = _run("--impl", impl_spec("sglang_current_error_path"))
    line = next(i for i, text in enumerate(Path(path).read_text().splitlines(), 1)
                if "errstr = cudart.cudaGetErrorString(int(rc))" in text)
    first = doc["causes"][0]
    showing = [s for s in doc["scenarios"]
               if any(v["rule"] == "error-reported" for v in s["violations"])]
    assert first["rule"] == "error-reported" and first["scenarios"] == len(showing) > 100
    assert Path(first["where"].rpartition(":")[0]).resolve() == Path(path).resolve()
    assert first["where"].endswith(f":{line}")
    assert first["code"] == "errstr = cudart.cudaGetErrorString(int(rc))"
    assert first["example"] == showing[0]["id"]
    # the double release on the exception path is the second cause, at its own line
    second = doc["causes"][1]
    assert second["rule"] == "unregister-not-a-live-base"
    assert "cudaHostUnregister" in second["code"]
    assert lines[0].startswith(f"causes ({len(doc['causes'])}, most frequent first):")
    m = HEAD.fullmatch(lines[1])
    assert m is not None, lines[1]
    assert m.groups() == (str(len(showing)), "error-reported", first["where"].rpartition(":")[0],
                          str(line), first["code"])
    assert lines[2].startswith(f"        e.g. {first['example']}: register() of ")
    # the whole TypeError, not cut after "supported:"
    assert "The following argument types are supported: 1. " in first["message"]


@pytest.mark.parametrize(("impl", "style", "selection", "rule", "needle"), [
    ("no_rollback", "sglang", f"{MLA}/fail-", "not-rolled-back", "raise RuntimeError"),
    ("zero_size_trailing_chunk", "sglang", f"{MLA}/at-limit", "register-size-zero",
     "cudaHostRegister"),
    ("over_limit_chunks", "generic", f"{MLA}/above-limit", "chunk-over-limit",
     "cudaHostRegister"),
    ("double_unregister", "sglang", f"{MLA}/above-limit", "unregister-not-a-live-base",
     "cudaHostUnregister"),
    ("teardown_not_idempotent", "sglang", f"{MLA}/above-limit", "teardown-raised", "raise"),
    ("do_nothing", "sglang", f"{MLA}/above-limit", "registered", "def register("),
])
def test_broken_implementations_name_their_line(impl: str, style: str, selection: str,
                                                rule: str, needle: str) -> None:
    """Each broken implementation's cause points at the line that holds its bug: the bad
    call for a call rule, the raise for a raise rule, the function for an end state."""
    doc, lines = _run("--impl", impl_spec(impl), "--style", style, "-k", selection)
    mine = [c for c in doc["causes"] if c["rule"] == rule]
    assert mine, doc["causes"]
    path, _, line = mine[0]["where"].rpartition(":")
    assert Path(path).resolve() == (CUDA_IMPLS / f"{impl}.py").resolve()
    assert mine[0]["code"] == _source(path, int(line)) and needle in mine[0]["code"]
    assert lines[0].startswith("causes (") and any(
        f"[{rule}]  {mine[0]['where']}: {mine[0]['code']}" in x for x in lines[1:])


def test_a_helper_module_is_the_call_site_and_the_raise_names_the_impl(tmp_path: Path) -> None:
    """The call site is the innermost frame of the user's code (a helper module next to the
    implementation); the raise site prefers the implementation's own file."""
    (tmp_path / "chunker.py").write_text(
        "def pin(cudart, ptr, size):\n"
        "    return int(cudart.cudaHostRegister(ptr, size, 0))\n")
    (tmp_path / "impl.py").write_text(
        "from chunker import pin\n\n\n"
        "def register(cudart, ptr, nbytes, *, granularity, chunk_limit):\n"
        "    rc = pin(cudart, ptr, nbytes + 4096)\n"
        "    if rc:\n"
        "        raise RuntimeError('pin failed')\n"
        "    return [(ptr, nbytes + 4096)]\n\n\n"
        "def teardown(cudart, ranges):\n"
        "    for ptr, _ in ranges:\n"
        "        cudart.cudaHostUnregister(ptr)\n")
    run = run_json("--impl", str(tmp_path / "impl.py:register"), "--style", "generic",
                   "-k", f"{MLA}/below-limit")
    run.scenarios()
    doc = run.doc
    where = {c["rule"]: (c["where"], c["code"]) for c in doc["causes"]}
    # one call past the end of the buffer: the helper's line is where the call is made
    assert where["range-outside-buffer"] == (f"{tmp_path / 'chunker.py'}:2",
                                            "return int(cudart.cudaHostRegister(ptr, size, 0))")


def test_a_rollback_unregister_that_failed_under_a_swallowed_error_is_a_leak() -> None:
    """errors_only_logged swallows the failure; the chunk its rollback could not release
    (injected cudaErrorInvalidValue, which leaves it pinned: docs/cuda-runtime.md §3.1) is
    labelled a leak at that unregister call, and the pool is "partly" unpinned, not
    unpinned."""
    doc, _ = _run("--impl", impl_spec("errors_only_logged"), "-k", f"{MLA}/fail-during-rollback")
    (s,) = doc["scenarios"]
    rules = {v["rule"]: v for v in s["violations"]}
    assert "would run partly unpinned" in rules["error-swallowed"]["message"]
    leak = rules["leak"]
    assert leak["message"].startswith("chunk [kv_buffer+0x3fccc000, +1070383104) is still "
                                      "registered: its rollback cudaHostUnregister (call #4) "
                                      "returned 1 cudaErrorInvalidValue")
    assert leak["code"] == "cudart.cudaHostUnregister(ptr)"
    # the correct reference on the same scenario: no leak
    ref = run_json("-k", f"{MLA}/fail-during-rollback").doc
    assert ref["scenarios"][0]["verdict"] == "pass"


def test_call_numbers_are_one_based_like_nth() -> None:
    """``nth = 2`` on cudaHostRegister (scenarios/mla/page_first_direct.toml,
    fail-middle-chunk) fails the second call; the message and the trace both call it #2
    (the first call of a scenario is #1)."""
    proc = run_kvreg("run", "--impl", impl_spec("no_rollback"), "-k", f"{MLA}/fail-middle-chunk",
                     "--trace")
    assert "#1 torch.cudaHostRegister(kv_buffer, " in proc.stdout
    assert "#2 torch.cudaHostRegister(kv_buffer+0x3fccc000, 0x3fccc000, 0) -> 1 " \
        "cudaErrorInvalidValue [injected]" in proc.stdout
    assert "#0 " not in proc.stdout


def test_hints_are_said_once() -> None:
    """do_nothing over a selection: one --pinning optional hint for every unpinned pool,
    none once --pinning is given; a mooncake style without a default-None max_mr_size gets
    the `own` limit hint once."""
    doc, lines = _run("--impl", impl_spec("do_nothing"), "-k", f"{MLA}/")
    assert len(doc["hints"]) == 1 and "--pinning optional" in doc["hints"][0]
    assert sum(1 for x in lines if x.startswith("hint: ")) == 1
    doc, _ = _run("--impl", impl_spec("do_nothing"), "-k", f"{MLA}/", "--pinning", "required")
    assert doc["hints"] == []
    other = Path(__file__).parents[1] / "mooncake_target" / "impls" / "other_mr_size.py"
    doc, _ = _run("--impl", f"{other}:register", "--style", "mooncake", "-k", "own_mr_limit")
    assert [h for h in doc["hints"] if 'limit = "own"' in h and "default None" in h]
    assert len(doc["hints"]) == 1


def test_identical_violations_are_shown_once_with_a_count() -> None:
    loop = [Violation("register-size-zero", f"call #{n} registers 0 bytes at kv+0x40 (the "
                      "end of kv)", n, where="impl.py:9", code="reg(p, 0)") for n in range(61)]
    other = Violation("register-size-zero", "call #99 registers 0 bytes at kv+0x80", 99,
                      where="impl.py:9", code="reg(p, 0)")
    out = dedupe([*loop, other])
    assert [(v.message, v.count) for v in out] == [
        ("call #0 registers 0 bytes at kv+0x40 (the end of kv)", 61),
        ("call #99 registers 0 bytes at kv+0x80", 1)]
    assert out[0].as_dict()["count"] == 61 and "count" not in out[1].as_dict()


def test_causes_group_by_rule_and_line_and_cover_errors() -> None:
    at = {"where": "impl.py:9", "code": "x()"}
    results = [
        ScenarioResult("a/1", "a", "fail", [Violation("leak", "m1", **at),
                                            Violation("leak", "m2", **at)]),
        ScenarioResult("a/2", "a", "fail", [Violation("leak", "m3", **at),
                                            Violation("registered", "gap")]),
        ScenarioResult("a/3", "a", "error", reason="the implementation did not finish within "
                       "5 s during register of kv, after 3 cudaHostRegister calls"),
        ScenarioResult("a/4", "a", "pass"),
    ]
    found = [c.as_dict() for c in causes(results)]
    assert found[0] == {"rule": "leak", "where": "impl.py:9", "code": "x()", "scenarios": 2,
                        "example": "a/1", "message": "m1"}
    assert {(c["rule"], c["scenarios"]) for c in found[1:]} == {("registered", 1), ("error", 1)}
    assert hints(results) == []


def test_whole_message_joins_lines() -> None:
    exc = TypeError("f(): incompatible function arguments. The following argument types are "
                    "supported:\n    1. (arg0: cudaError) -> str\n\nInvoked with: 2")
    assert whole_message(exc) == ("f(): incompatible function arguments. The following "
                                  "argument types are supported: 1. (arg0: cudaError) -> str "
                                  "Invoked with: 2")
    assert whole_message("x" * 5000).endswith("... (1000 more characters)")


def test_an_empty_buffer_gives_no_recovered_warning() -> None:
    """A failed call on a zero-byte buffer recovered nothing: an empty pool is trivially
    "fully registered", which used to read "recovered ... in 0 registration(s)"."""
    from kvreg.harness.run.endstate import BufferEnd, FailedCall, recovered_warnings

    failed = [FailedCall(0, "cudaHostRegister", 0x1000, 4096, 2, "cudaErrorMemoryAllocation")]
    empty = BufferEnd("kv", 0x1000, 0, 4096, True, None, 1, [], failed)
    assert recovered_warnings([empty]) == []
    whole = BufferEnd("kv", 0x1000, 8192, 4096, True, None, 3, [(0x1000, 8192)], failed)
    (w,) = recovered_warnings([whole])
    assert w.rule == "recovered" and "(call #1) returned 2" in w.message \
        and "fully registered in 1 registration(s)" in w.message
