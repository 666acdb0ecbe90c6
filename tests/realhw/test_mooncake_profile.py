"""Profile learning without the real store: facts in, fields and mismatches out."""

from __future__ import annotations

from kvreg.fakes.mooncake import get_store_profile
from kvreg.realhw.mooncake_profile import learn, mismatches

FACTS = {"version": "0.3.13.post1", "default_kv_lease_ttl_ms": 10000,
         "reads_take_lease": True, "resetup_replaces_client": True,
         "objects_live_in_segments": True, "duplicate_key_winner": "last",
         "store_memcpy_tcp": True}


def test_a_matching_profile_has_no_mismatch() -> None:
    assert mismatches(get_store_profile("v0.3.13"), FACTS) == []


def test_each_wrong_fact_is_named() -> None:
    wrong = get_store_profile("v0.3.13").replace(reads_take_lease=False,
                                                 default_kv_lease_ttl_ms=5000)
    got = mismatches(wrong, FACTS)
    assert got == ["default_kv_lease_ttl_ms: profile 5000, real store 10000",
                   "reads_take_lease: profile False, real store True"]
    assert mismatches(get_store_profile("released"), FACTS) == [
        "version: profile 0.3.12.post1, real store 0.3.13.post1"]
    assert "store_memcpy_tcp" in mismatches(get_store_profile("v0.3.13"),
                                            {**FACTS, "store_memcpy_tcp": False})[0]


def test_learn_sets_the_fields_from_the_facts() -> None:
    base = get_store_profile("released").replace(reads_take_lease=False,
                                                 duplicate_key_winner="first")
    learned = learn(base, FACTS)
    assert learned.reads_take_lease is True and learned.duplicate_key_winner == "last"
    assert "0.3.13.post1" in learned.notes["learned"] and learned.name == "released"
