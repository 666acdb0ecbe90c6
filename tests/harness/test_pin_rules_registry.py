"""The rule registry (harness/run/rules.py) at edges its mutation sample found unpinned
(docs/mutation-testing.md, seed 303): a rule is declared in one place, and what the reports,
the call sites and FORMAT.md read of it cannot be changed behind the registry's back."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvreg.harness.run import rules as registry
from kvreg.harness.run.rules import SITE_CALL, SITE_END, TEARDOWN, declare, get_rule, rule


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


@pytest.mark.parametrize("given", [{"site": SITE_CALL}, {"judges": (TEARDOWN,)},
                                   {"contract": "repeatable-teardown"}])
def test_a_declared_rule_takes_no_second_site_steps_or_contract(
        scratch: None, given: dict[str, object]) -> None:
    # any one of the declaring arguments alone is a second declaration, refused
    declare("t-once", "a rule declared by the test", site=SITE_END)
    with pytest.raises(ValueError, match="declared already"):
        rule("t-once", target="t", doc="scenarios/FORMAT.md", **given)
    assert get_rule("t-once") == registry.Rule("t-once", "a rule declared by the test",
                                               SITE_END)


def test_a_rule_read_from_the_registry_cannot_be_changed_in_place() -> None:
    leak = get_rule("leak")
    assert leak is not None
    with pytest.raises(dataclasses.FrozenInstanceError):
        leak.site = SITE_CALL
    assert {leak, get_rule("leak")} == {leak}          # a value: hashable, equal to itself


def test_the_rules_table_is_found_only_between_both_markers() -> None:
    # FORMAT.md keeps the generated table between two markers; --check and --write refuse a
    # file that lacks either (exit 2) instead of writing the table in a wrong place
    table = registry.markdown([])
    assert registry.current_table(table) == table                  # opens at offset 0
    assert registry.current_table(f"intro\n{table}\nmore") == table
    begin, end = table.splitlines()[0], table.splitlines()[-1]
    assert registry.current_table(f"intro\n{end}\n") is None       # no opening marker
    assert registry.current_table(f"intro\n{begin}\n") is None     # no closing marker
    assert registry.current_table("no markers at all") is None


def test_the_rules_table_command_checks_writes_and_prints(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    # `--check` exits 1 on a stale table and leaves the file alone; `--write` replaces it
    # (exit 0), after which `--check` passes; a file without the markers is bad input (2);
    # with no option the table is printed (exit 0)
    table = registry.markdown()
    stale = table.replace("| rule |", "| a stale rule |")
    fmt = tmp_path / "FORMAT.md"
    fmt.write_text(f"# Format\n\n{stale}\n\nafter\n")
    monkeypatch.setattr(registry, "FORMAT_MD", fmt)
    assert registry.main(["--check"]) == 1
    assert "rules table is stale" in capsys.readouterr().err
    assert stale in fmt.read_text()
    assert registry.main(["--write"]) == 0
    assert fmt.read_text() == f"# Format\n\n{table}\n\nafter\n"
    assert registry.main(["--check"]) == 0
    fmt.write_text("# Format without the markers\n")
    assert registry.main(["--check"]) == 2
    capsys.readouterr()
    assert registry.main([]) == 0
    assert capsys.readouterr().out == table + "\n"
