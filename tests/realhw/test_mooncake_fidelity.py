"""The fidelity report's Mooncake section (realhw/mooncake_fidelity.py): the fake store held
against a real one started on loopback, counted call by call (docs/mooncake-verbs.md §7)."""

from __future__ import annotations

from typing import Any

import pytest

from kvreg.realhw import mooncake_fidelity as mf
from kvreg.realhw.mooncake_master import missing_reason


def test_without_the_wheel_the_section_says_what_is_missing(monkeypatch: Any) -> None:
    import kvreg.realhw.mooncake_master as master

    monkeypatch.setattr(master, "missing_reason", lambda: "no mooncake_master on PATH")
    entry = mf.run_mooncake_fidelity(seeds=1)
    assert entry == {"ran": False, "reason": "no mooncake_master on PATH"}
    assert mf.mooncake_markdown(entry)[-1] == "Not run: no mooncake_master on PATH."


def test_the_section_reports_every_count_and_each_unexplained_call() -> None:
    entry = {"ran": True, "version": "0.3.13.post1", "profile": "v0.3.13", "seeds": 2,
             "length": 40, "calls": 80, "agreeing": 77, "named": {"overlapping": 2},
             "unexplained": ["seed 1, call 3 remove(k): real -706, fake 0"]}
    text = "\n".join(mf.mooncake_markdown(entry))
    assert "**80 calls compared: 77 agree; named divergences: overlapping 2; 1 unexplained.**" \
        in text
    assert "- unexplained: seed 1, call 3 remove(k): real -706, fake 0" in text
    assert mf.mooncake_markdown(None) == []   # a run that did not ask for it has no section


@pytest.mark.kvreg_mooncake_real
def test_the_real_store_agrees_with_the_fake_over_two_sequences() -> None:
    if missing_reason() is not None:
        pytest.skip(f"the Mooncake wheel is not usable here: {missing_reason()}")
    entry = mf.run_mooncake_fidelity(seeds=2, length=20)
    assert entry["ran"] and entry["calls"] == 40
    assert entry["unexplained"] == []
    assert entry["agreeing"] + sum(entry["named"].values()) == entry["calls"]
