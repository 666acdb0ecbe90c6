
"""The fake's v0.3.13 profile, learned from the real store and checked field by field."""

from __future__ import annotations

from typing import Any

import pytest

from kvreg.fakes.mooncake import get_store_profile
from kvreg.realhw.mooncake_profile import LEARNED_FIELDS, learn, mismatches, observe

pytestmark = pytest.mark.kvreg_mooncake_real


def test_the_v0_3_13_profile_matches_the_real_store(real: Any) -> None:
    facts = observe(real)
    assert set(LEARNED_FIELDS) <= set(facts)
    profile = get_store_profile("v0.3.13")
    assert mismatches(profile, facts) == []
    learned = learn(get_store_profile("released"), facts)
    assert all(getattr(learned, f) == getattr(profile, f) for f in LEARNED_FIELDS
               if f != "store_memcpy_tcp")
    assert facts["default_kv_lease_ttl_ms"] == 10000 and facts["duplicate_key_winner"] == "last"
