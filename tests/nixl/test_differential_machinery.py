"""The NIXL differential suite's own machinery, without the wheel: its sequences are
deterministic and reach every call kind, the fake agrees with itself, and a fake that
behaves otherwise (another profile) is caught call by call (realhw/nixl_diff.py)."""

from __future__ import annotations

from typing import Any

import pytest

from kvreg.fakes.nixl import FakeNixl, agent, sections
from kvreg.fakes.nixl.api import nixl_agent_config
from kvreg.realhw.nixl_diff import (
    SECTIONS,
    SECTIONS_SEED,
    NixlDifferential,
    generate,
    make_side,
    plain,
    run_side,
)

SEEDS = range(24)
LENGTH = 40


def _results(profile: str, seed: int) -> list[object]:
    fake = FakeNixl(profile)
    side = make_side(fake.agent_class(), nixl_agent_config, seed)
    return [plain(r) for r in run_side(side, generate(seed, LENGTH))]


def test_sequences_are_deterministic_and_varied() -> None:
    assert generate(7, LENGTH) == generate(7, LENGTH)
    names = {op.name for seed in SEEDS for op in generate(seed, LENGTH)}
    assert names == {"register", "deregister", "dereg_fresh", "load", "reload", "remove",
                     "load_bad", "xfer", "keep", "post", "prep", "make", "release_dlist",
                     "unposted_state"}
    forms = {op.args[1] for seed in SEEDS for op in generate(seed, LENGTH)
             if op.name == "register"}
    assert forms == {"tuples", "numpy", "tensor", "vram", "no_memtype", "null"}


def test_the_fake_agrees_with_itself() -> None:
    diff = NixlDifferential("ucx-host")
    for seed in range(6):
        diff.add(seed, LENGTH, _results("ucx-host", seed))
    assert diff.result.unexplained == []
    assert diff.result.calls == diff.result.agreeing == 6 * LENGTH
    # the sequences reach real outcomes, not only refusals
    assert sum(v for k, v in diff.result.by_call.items() if k in ("xfer", "make")) > 20


def test_a_fake_that_looks_registrations_up_otherwise_is_caught(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # a plausible wrong model: a descriptor found when any one registration covers it (the
    # wheel looks at the entries NIXL's sorted search and forward walk reach, §4.1)
    real = {seed: _results("ucx-host", seed) for seed in SEEDS}

    def anywhere(ranges: Any, descs: Any) -> bool:
        return bool(descs) and all(any(sections.covers(r, d) for r in ranges) for d in descs)

    monkeypatch.setattr(agent, "populate", anywhere)
    diff = NixlDifferential("ucx-host")
    for seed in SEEDS:
        diff.add(seed, LENGTH, real[seed])
    assert diff.result.unexplained, "the naive lookup agreed everywhere"
    assert "NIXL_ERR_NOT_FOUND" in diff.result.unexplained[0]


def test_a_fake_whose_refusals_leave_no_section_is_caught(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the fixed sequence of refused lists (docs/nixl.md §3.3) holds the sections a refusal
    # leaves: a model where it leaves nothing behind loads the peer it must not
    assert generate(SECTIONS_SEED, LENGTH) == list(SECTIONS)
    real = _results("ucx-host", SECTIONS_SEED)
    diff = NixlDifferential("ucx-host")
    diff.add(SECTIONS_SEED, len(SECTIONS), real)
    assert diff.result.unexplained == []
    monkeypatch.setattr(agent.nixlAgent, "refused", lambda self, mem: None)
    broken = NixlDifferential("ucx-host")
    broken.add(SECTIONS_SEED, len(SECTIONS), real)
    assert broken.result.unexplained, "a refusal that leaves no section agreed"
    assert "NIXL_ERR_NOT_FOUND" in broken.result.unexplained[0]
