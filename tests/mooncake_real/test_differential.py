"""The differential suite: seeded call sequences on the real store and on the fake.

Each seed is a sequence of 40 store calls (registration edge cases, puts and gets of every
shape, multi-buffer, batches with misses and duplicate keys, removes and leases; every
fourth one with close and re-setup). Return values and the bytes read back must be equal
call by call, or the difference must be one of ``DIVERGENCES`` (each with its evidence,
docs/mooncake-verbs.md §7). Deterministic: ``random.Random(seed)``; the seeds are fixed.
"""

from __future__ import annotations

from typing import Any

import pytest

from kvreg.fakes.mooncake import get_store_profile
from kvreg.realhw.mooncake_diff import DIVERGENCES, Comparison, Differential, generate

from ..helpers.mooncake_masters import LONG_LEASE_MS

pytestmark = pytest.mark.kvreg_mooncake_real

SEEDS = range(48)
LENGTH = 40
PROFILE = get_store_profile("v0.3.13").replace(default_kv_lease_ttl_ms=LONG_LEASE_MS)


@pytest.fixture(scope="module")
def differential(master: Any) -> Any:
    from kvreg.realhw.mooncake_real import RealMooncake

    if master is None:          # no wheel: the test fails under --kvreg-require-hw
        yield None
        return
    with RealMooncake(master) as real:
        diff = Differential(real, PROFILE)
        try:
            yield diff
        finally:
            diff.close()


def test_generated_sequences_are_deterministic_and_varied() -> None:
    assert generate(7, LENGTH) == generate(7, LENGTH)
    names = {op.name for seed in SEEDS for op in generate(seed, LENGTH,
                                                          lifecycle=seed % 4 == 3)}
    # every call the suite claims to cover is drawn
    assert names >= {"register", "unregister", "put_from", "get_into", "put", "get",
                     "batch_put", "batch_get", "batch_put_multi", "batch_get_multi",
                     "is_exist", "batch_is_exist", "get_size", "remove", "batch_remove",
                     "remove_all", "remove_by_regex", "close", "setup", "health_check"}


def test_every_call_agrees_or_is_a_named_divergence(differential: Any,
                                                    record_property: Any) -> None:
    for seed in SEEDS:
        differential.run(seed, LENGTH, lifecycle=seed % 4 == 3)
    result: Comparison = differential.result
    record_property("mooncake_differential", result.summary())
    print(result.summary())
    assert result.unexplained == [], "\n\n".join(result.unexplained[:3])
    assert result.calls >= len(SEEDS) * LENGTH * 0.9     # the sequences really ran
    assert set(result.named) <= {d.name for d in DIVERGENCES}


@pytest.mark.parametrize(("field", "value"), [
    ("reads_take_lease", False),           # remove after a read would succeed
    ("duplicate_key_winner", "first"),     # a put batch with duplicates stores the first
    ("resetup_replaces_client", False),    # a second setup would be -600
])
def test_a_fake_with_one_fact_wrong_is_caught(master: Any, field: str, value: Any) -> None:
    # the suite can fail: a fake with one behaviour reverted to a wrong value disagrees
    from kvreg.realhw.mooncake_real import RealMooncake

    wrong = PROFILE.replace(**{field: value})
    with RealMooncake(master) as real:
        diff = Differential(real, wrong)
        try:
            for seed in SEEDS:
                diff.run(seed, LENGTH, lifecycle=True)
                if diff.result.unexplained:
                    break
        finally:
            diff.close()
    assert diff.result.unexplained, f"{field}={value!r} went unnoticed"
