"""The rule registry (harness/run/rules.py): every rule a check emits is declared once, with
its site, the steps it judges and its docs; the checks run in declared order; FORMAT.md's
rules table is the registry's."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvreg.harness.run import rules as registry
from kvreg.harness.run.callsite import CallSites
from kvreg.harness.run.causes import hints
from kvreg.harness.run.result import ScenarioResult, Violation
from kvreg.harness.run.rules import (
    ORDER_PENDING,
    ORDER_RELEASE,
    ORDER_SEAMS,
    ORDER_TEARDOWN,
    ORDER_TRANSFER,
    SITE_END,
    SITE_RELEASE,
    SITE_TEARDOWN,
    TEARDOWN,
    VIOLATION,
    WARNING,
    all_rules,
    declare,
    rule,
    rules_for,
    run_rules,
    teardown_rules,
)

ROOT = Path(__file__).resolve().parents[2]
HARNESS = ROOT / "harness"


@pytest.fixture
def scratch() -> Iterator[None]:
    """Rules declared in a test are gone after it."""
    rules, checks = dict(registry.RULES), {k: list(v) for k, v in registry._CHECKS.items()}
    try:
        yield
    finally:
        registry.RULES.clear()
        registry.RULES.update(rules)
        registry._CHECKS.clear()
        registry._CHECKS.update(checks)


def _emitted_names() -> dict[str, str]:
    """Every rule name a harness module passes as the first argument of ``Violation(...)``
    or ``IoFailure(...)`` (a transfer's finding, turned into a violation by its rule)."""
    found: dict[str, str] = {}
    for path in HARNESS.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                    and node.func.id in ("Violation", "IoFailure") and node.args:
                first = node.args[0]
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    found[first.value] = f"{path.relative_to(ROOT)}:{node.lineno}"
    return found


def test_every_rule_a_check_emits_is_registered() -> None:
    names = {r.name for r in all_rules()}
    emitted = _emitted_names()
    assert len(emitted) >= 20, emitted           # the scan finds the checks' constructions
    missing = {n: where for n, where in emitted.items() if n not in names}
    assert not missing, f"rules emitted but not declared in the registry: {missing}"


def test_every_registered_rule_has_a_target_a_doc_and_a_summary() -> None:
    for r in all_rules():
        assert r.targets, r.name
        assert all(re.match(r"(docs/[\w-]+\.md §[\d.]+|scenarios/FORMAT\.md|harness/\S+\.py)$",
                            d) for _, d in r.docs), r.docs
        assert len(r.summary) >= 30, r.name


def test_both_targets_judge_the_shared_rules_in_their_order() -> None:
    all_rules()
    cuda = [r.name for r in rules_for("cuda")]
    mooncake = [r.name for r in rules_for("mooncake")]
    assert cuda[:2] == mooncake[:2] == ["call-budget", "register-size-zero"]
    assert cuda.index("not-rolled-back") < cuda.index("leak") < cuda.index("teardown-raised")
    assert "chunk-over-limit" in cuda and "chunk-over-limit" not in mooncake
    assert "mr-over-limit" in mooncake and "mr-over-limit" not in cuda
    assert {"round-trip-mismatch", "pd-transfer-failed"} <= set(mooncake)


def test_teardown_rules_are_the_rules_a_teardown_check_reports() -> None:
    """The pool-class check of a teardown (pool_class/assertions.py) reports these of what
    check_run finds: the violations among them are the five it always reported."""
    all_rules()
    violations = {n for n in teardown_rules() if registry.RULES[n].severity != WARNING}
    # shm-leaked is judged across ranks (harness/ranks/checks.py), never by check_run
    assert violations == {"leak", "unregister-not-a-live-base", "teardown-raised",
                          "not-rolled-back", "error-pending", "shm-leaked"}
    assert TEARDOWN in registry.RULES["unregister-not-retried"].judges


def test_sites_are_taken_at_the_teardown_only_for_what_teardown_did() -> None:
    """callsite.py takes the teardown's site for these two only; the other teardown rules
    point at a call (unregister-not-a-live-base) or at the raise (not-rolled-back)."""
    at_teardown = {r.name for r in all_rules() if r.site in (SITE_TEARDOWN, SITE_RELEASE)}
    assert at_teardown == {"teardown-raised", "leak"}


def test_an_unknown_rule_gets_the_end_state_site() -> None:
    class Impl:
        register_fn = None
        teardown_fn = None
    sites = CallSites(Impl())  # type: ignore[arg-type]
    assert registry.get_rule("third-lanes") is None
    assert sites.site_for(Violation("third-lanes", "5 lanes > 4", 3)) is None


def test_order_keys_come_after_every_call_and_in_the_end_states_order() -> None:
    assert 1 << 32 < ORDER_TRANSFER < ORDER_SEAMS < ORDER_RELEASE < ORDER_TEARDOWN \
        < ORDER_PENDING < Violation("x", "y").seq


def test_no_unnamed_order_sentinel_is_left_in_the_checks() -> None:
    sentinel = re.compile(r", \(?1 << 4[0-3]")
    for name in ("cuda/checks.py", "mooncake/checks.py", "mooncake/transfers.py",
                 "mooncake/pd.py", "run/endstate.py", "cuda/seam_cuts.py"):
        text = (HARNESS / name).read_text()
        assert not sentinel.search(text), name


def test_run_rules_keeps_the_declared_order_among_equal_seqs(scratch: None) -> None:
    @rule("t-second", target="t", doc="scenarios/FORMAT.md", summary="a test rule, second "
          "declared, same seq", site=SITE_END)
    def second(ctx: list[str]) -> list[Violation]:
        return [Violation("t-second", ctx[0], 5)]

    @rule("t-first", target="t", doc="scenarios/FORMAT.md", summary="a test rule that "
          "reports an earlier call", site=SITE_END)
    def first(ctx: list[str]) -> list[Violation]:
        return [Violation("t-first", ctx[0], 2), Violation("t-first", "tie", 5)]

    @rule("t-first", target="t", doc="scenarios/FORMAT.md", emits=WARNING)
    def warn(ctx: list[str]) -> list[Violation]:
        return [Violation("t-first", "w", 1)]

    found = run_rules("t", VIOLATION, ["m"])
    assert [(v.rule, v.message, v.seq) for v in found] == [
        ("t-first", "m", 2), ("t-second", "m", 5), ("t-first", "tie", 5)]
    assert [v.message for v in run_rules("t", WARNING, ["m"])] == ["w"]
    assert registry.RULES["t-first"].severity == "violation or warning"
    assert registry.RULES["t-second"].severity == VIOLATION
    assert run_rules("no-such-target", VIOLATION, None) == []


def test_a_rule_is_declared_once(scratch: None) -> None:
    declare("t-once", "a rule declared by the test", site=SITE_END)
    with pytest.raises(ValueError, match="declared twice"):
        declare("t-once", "again", site=SITE_END)
    with pytest.raises(ValueError, match="declared already"):
        rule("t-once", target="t", doc="scenarios/FORMAT.md", summary="other words")
    with pytest.raises(ValueError, match="not declared: give its summary"):
        rule("t-new", target="t", doc="scenarios/FORMAT.md")
    with pytest.raises(ValueError, match="unknown site"):
        declare("t-site", "a rule with a made-up site", site="somewhere")
    with pytest.raises(ValueError, match="unknown contract"):
        declare("t-contract", "a rule of a made-up contract", site=SITE_END,
                contract="pinky-promise")
    with pytest.raises(ValueError, match="emits"):
        rule("t-once", target="t", doc="scenarios/FORMAT.md", emits="shout")
    with pytest.raises(ValueError, match="'t-also' is not declared"):
        rule("t-once", "t-also", target="t", doc="scenarios/FORMAT.md")


def test_a_declaring_module_executed_again_changes_nothing(scratch: None) -> None:
    """pytester's in-process runs drop from sys.modules what they imported; a target's
    checks module imported again declares its rules as before and must neither raise nor
    add a second function reporting every finding twice."""
    def declaring_module() -> None:
        @rule("t-again", target="t", doc="scenarios/FORMAT.md", summary="a rule whose "
              "module runs twice", site=SITE_END)
        def check_again(ctx: list[str]) -> list[Violation]:
            return [Violation("t-again", ctx[0], 3)]

        @rule("t-after", target="t", doc="scenarios/FORMAT.md", summary="declared after it",
              site=SITE_END)
        def check_after(ctx: list[str]) -> list[Violation]:
            return [Violation("t-after", ctx[0], 3)]

    declaring_module()
    declaring_module()
    assert [v.rule for v in run_rules("t", VIOLATION, ["m"])] == ["t-again", "t-after"]
    with pytest.raises(ValueError, match="declared already"):
        rule("t-again", target="t", doc="scenarios/FORMAT.md", summary="other words",
             site=SITE_END)


def test_format_md_rules_table_is_current() -> None:
    text = (ROOT / "scenarios" / "FORMAT.md").read_text()
    assert registry.current_table(text) == registry.markdown(), (
        "scenarios/FORMAT.md's rules table is stale: run "
        "`python -m kvreg.harness.run.rules --write`")
    assert registry.main(["--check"]) == 0


def test_markdown_lists_every_rule_once() -> None:
    table = registry.markdown()
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    assert [row.split("`")[1] for row in rows] == sorted(r.name for r in all_rules())
    assert "| `unregister-not-retried` | warning | cuda, gpu_rdma | repeatable-teardown |" \
        in table


def test_kvreg_list_rules_reads_the_registry(capsys: pytest.CaptureFixture[str]) -> None:
    from kvreg.harness.cli.main import main

    assert main(["list", "--rules", "-k", "over-limit"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^chunk-over-limit +violation +\[cuda\] +contract: chunk-limit$", out,
                     re.M), out
    assert re.search(r"^mr-over-limit +violation +\[mooncake\]$", out, re.M), out
    assert out.rstrip().endswith("2 rules")
    assert main(["list", "--rules", "bundled"]) == 2
    assert "--rules takes no PATH" in capsys.readouterr().err


def test_the_mr_limit_hint_follows_the_style_that_gives_max_mr_size() -> None:
    failed = [ScenarioResult("a/b", "mla", "fail",
                             [Violation("mr-over-limit", "call #1 register_buffer(...)", 0)])]
    assert any("max_mr_size register was given" in h for h in hints(failed, style="mooncake"))
    for style in ("reference", "generic", "sglang"):
        assert not any("max_mr_size" in h for h in hints(failed, style=style)), style


def _long_functions(path: Path, limit: int) -> list[str]:
    tree = ast.parse(path.read_text())
    return [f"{path.name}:{n.name} ({n.end_lineno - n.lineno + 1} lines)"
            for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and n.end_lineno is not None and n.end_lineno - n.lineno + 1 > limit]


def test_the_checks_are_small_functions() -> None:
    for name in ("cuda/checks.py", "mooncake/checks.py", "run/rules.py", "run/callsite.py",
                 "run/endstate.py"):
        assert not _long_functions(HARNESS / name, 80), name
    # the rule functions themselves stay far below that
    assert not _long_functions(HARNESS / "cuda" / "checks.py", 45)


def test_what_is_left_at_the_end_is_said_in_the_order_the_runtime_lists_it() -> None:
    """leak and not-rolled-back are two rule functions; their violations keep the order of
    the chunks live at the end, interleaved, as when one loop said both (ORDER_RELEASE +
    the chunk's place)."""
    from kvreg.fakes.recorder import TraceEntry
    from kvreg.harness.cuda.checks import BufferRun, RunRecord, check_run
    from kvreg.harness.pools.registry import make_geometry
    from kvreg.harness.run.endstate import summarize_exception

    geo = make_geometry("mla", layout="page_first_direct", layer_num=2, kv_lora_rank=4,
                        qk_rope_head_dim=4, dtype="bfloat16", page_size=2, page_num=4)
    spec = geo.buffers()[0]
    one, two = 0x7F0000000000, 0x7F0000100000
    err = RuntimeError("cudaErrorMemoryAllocation (2)")
    failed = BufferRun(0, spec, one, 64, err, None, False, 0, 3, summarize_exception(err), 64)
    ok = BufferRun(1, spec, two, 64, None, None, True, 3, 6, None, 64)

    def reg(seq: int, ptr: int, code: int = 0) -> TraceEntry:
        return TraceEntry(seq, "torch", "cudaHostRegister", (ptr, 128, 0), code, code,
                          False, 0)
    trace = [reg(0, one), reg(1, one + 128, 2), reg(3, two), reg(4, two + 128)]
    r = RunRecord(geo, 128, "register-error", None, [failed, ok], trace, teardown_start=10,
                  exercised=("register", "teardown"),
                  live_end=[(two + 128, 128), (one, 128), (two, 128)])
    found = [(v.rule, v.message.split(")")[0]) for v in check_run(r)
             if v.rule in ("leak", "not-rolled-back")]
    assert found == [("leak", "chunk [kv_buffer+0x80, +128"),
                     ("not-rolled-back", "chunk [kv_buffer+0x0, +128"),
                     ("leak", "chunk [kv_buffer+0x0, +128")]
