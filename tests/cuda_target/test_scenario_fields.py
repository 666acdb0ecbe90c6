"""The fields of a ``[[scenario]]`` table, one registered validator each
(``harness/scenario/fields.py``): the keys a scenario may hold are those the validators read
and the targets' option tables, as scenarios/FORMAT.md documents them; problems are reported
in the validators' order; and a field is added by registering one validator."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from kvreg.harness.run.targets import option_tables
from kvreg.harness.scenario import ScenarioError, load_file
from kvreg.harness.scenario import fields as fields_module
from kvreg.harness.scenario.fields import VALIDATORS, Fields, scenario_keys, validator

ROOT = Path(__file__).resolve().parents[2]
POOL = '''format = 1
[pool]
type = "mla"
params = { layout = "page_first_direct", layer_num = 61, kv_lora_rank = 512, \
qk_rope_head_dim = 64, dtype = "bfloat16", page_size = 64 }
[[scenario]]
name = "ok"
guards = "a valid scenario around the field under test (sglang PR #36798)"
pages = 10
'''
# a value every field refuses, in the order of the validators (name first: it is part of
# where every later problem is said to be)
EVERY_FIELD_WRONG = {
    "params": "[1]", "total_gib": "0", "memory": '"swap"', "chunk_gb": "-1", "profile": '"p"',
    "profile_options": '{ nope = 1 }', "faults": "3", "exercise": '["dance"]',
    "contract": '"c"', "expect": '"e"', "empty": '"e"', "call_budget": "0", "tags": "[1]",
    "backends": '["gpu"]', "target": '"t"', "pinning": '"p"',
}


def _write(tmp_path: Path, extra: str, name: str = "f") -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(POOL + extra)
    return path


def _problem_fields(err: ScenarioError) -> list[str]:
    """The field each line of the error names, in order."""
    return [re.sub(r"^.*?\): ", "", line).split(":")[0] for line in str(err).splitlines()]


def test_the_keys_are_the_documented_fields() -> None:
    text = (ROOT / "scenarios" / "FORMAT.md").read_text()
    table = text[text.index("| field | meaning |"):].split("\n\n")[0]
    documented = {key for row in table.splitlines()[2:]
                  for key in re.findall(r"`([a-z_]+)`", row.split("|")[1])}
    assert documented == set(scenario_keys()) | set(option_tables())
    # each key is read by one validator
    reads = [key for v in VALIDATORS for key in v.reads]
    assert sorted(reads) == sorted(set(reads))


def test_problems_are_reported_in_the_validators_order(tmp_path: Path) -> None:
    extra = "".join(f"{key} = {value}\n" for key, value in EVERY_FIELD_WRONG.items())
    with pytest.raises(ScenarioError) as err:
        load_file(_write(tmp_path, extra))
    found = _problem_fields(err.value)
    # the target validator reports nothing: an unknown target is said with the target's
    # options (after backends), where the target's own table is validated
    said = {"target": (), "options": ("target",)}
    order = [key for v in VALIDATORS for key in said.get(v.name, v.reads)]
    assert found == [key for key in order if key in EVERY_FIELD_WRONG]
    assert len(found) == len(EVERY_FIELD_WRONG)


def test_a_field_is_one_registered_validator(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A field written in a test as one validator: the key is accepted, its value resolved,
    its problem reported after those of the fields registered before it."""
    monkeypatch.setattr(fields_module, "VALIDATORS", list(VALIDATORS))
    seen: list[Any] = []

    @validator("colour")
    def _colour(f: Fields) -> str:
        colour = f.merged.get("colour", "grey")
        if colour not in ("grey", "red"):
            f.fail("colour", "'grey' or 'red'", colour)
        seen.append(colour)
        return str(colour)

    assert "colour" in scenario_keys() and "colour" not in {k for v in VALIDATORS
                                                             for k in v.reads}
    (sc,) = load_file(_write(tmp_path, 'colour = "red"\n'))
    assert sc.name == "ok" and seen == ["red"]
    with pytest.raises(ScenarioError) as err:
        load_file(_write(tmp_path, 'colour = "blue"\npinning = "p"\n', "bad"))
    assert _problem_fields(err.value) == ["pinning", "colour"]
    assert "colour: expected 'grey' or 'red'; got 'blue'" in str(err.value)
    # without the validator the key is an unknown field again
    monkeypatch.setattr(fields_module, "VALIDATORS", list(VALIDATORS))
    with pytest.raises(ScenarioError, match=r"scenario\[0\]\.colour: .*unknown field"):
        load_file(_write(tmp_path, 'colour = "red"\n'))


def test_a_field_name_is_registered_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fields_module, "VALIDATORS", list(VALIDATORS))
    with pytest.raises(ValueError, match="'pinning' is registered already"):
        validator("pinning")(lambda f: None)


def test_moved_validators_report_in_their_new_order(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The order is the registry's, not one written elsewhere: with the validators of
    expect and pinning swapped, their problems swap too."""
    text = 'expect = "e"\npinning = "p"\nmemory = "swap"\n'
    with pytest.raises(ScenarioError) as err:
        load_file(_write(tmp_path, text))
    assert _problem_fields(err.value) == ["memory", "expect", "pinning"]
    names = [v.name for v in VALIDATORS]
    swapped = list(VALIDATORS)
    i, j = names.index("expect"), names.index("pinning")
    swapped[i], swapped[j] = swapped[j], swapped[i]
    monkeypatch.setattr(fields_module, "VALIDATORS", swapped)
    with pytest.raises(ScenarioError) as err:
        load_file(_write(tmp_path, text))
    assert _problem_fields(err.value) == ["memory", "pinning", "expect"]


@pytest.mark.parametrize(("extra", "words"), [
    ('profile = ["h200-r580"]\n', "profile: expected one of ['h100-r575'"),
    ("profile = { name = 1 }\n", "profile: expected one of ['h100-r575'"),
    ('backends = [["fake"]]\n', "backends: expected a non-empty array of 'fake' and 'cuda'"),
    ("backends = [{ a = 1 }]\n", "backends: expected a non-empty array of 'fake' and 'cuda'"),
    ("backends = []\n", "backends: expected a non-empty array of 'fake' and 'cuda'; got []"),
    ('backends = ["cuda", "fake"]\n', None),
])
def test_a_value_of_another_type_is_a_problem_not_a_crash(tmp_path: Path, extra: str,
                                                          words: str | None) -> None:
    """Values that cannot be looked up in a table (a list, a table) are refused like any
    other wrong value: one line naming the field, never a TypeError."""
    if words is None:
        (sc,) = load_file(_write(tmp_path, extra))
        assert sc.backends == ("cuda", "fake")
        return
    with pytest.raises(ScenarioError) as err:
        load_file(_write(tmp_path, extra))
    assert words in str(err.value)


@pytest.mark.parametrize("pool_type", ['["mla"]', "{ a = 1 }"])
def test_a_pool_type_of_another_type_is_a_problem_not_a_crash(tmp_path: Path,
                                                             pool_type: str) -> None:
    path = tmp_path / "t.toml"
    path.write_text(POOL.replace('type = "mla"', f"type = {pool_type}"))
    with pytest.raises(ScenarioError, match=r"pool\.type: expected one of \['deepseek"):
        load_file(path)
