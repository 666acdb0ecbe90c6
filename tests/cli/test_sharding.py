"""--shard K/N: every scenario in exactly one part, the same split everywhere, balanced."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvreg.harness.run.sharding import (
    Shard,
    ShardError,
    expected_cost,
    parse_shard,
    shard_of,
    split,
)
from kvreg.harness.scenario import load_paths

CATALOG = load_paths()


def _part_ids(scenarios: list, count: int) -> list[list[str]]:
    return [sorted(scenarios[i].id for i in part) for part in split(scenarios, count)]


@settings(max_examples=15)
@given(st.integers(min_value=1, max_value=12), st.randoms(use_true_random=False))
def test_parts_cover_the_selection_once_whatever_the_input_order(count: int, rnd) -> None:
    shuffled = list(CATALOG)
    rnd.shuffle(shuffled)
    ids = _part_ids(shuffled, count)
    flat = [i for part in ids for i in part]
    assert sorted(flat) == sorted(s.id for s in CATALOG)          # each exactly once
    assert ids == _part_ids(CATALOG, count)                       # order does not matter
    assert [sorted(s.id for s in shard_of(shuffled, Shard(k, count)))
            for k in (1, count)] == [ids[0], ids[-1]]


def test_parts_are_balanced_by_expected_cost() -> None:
    costs = [expected_cost(s) for s in CATALOG]
    for count in (2, 3, 4, 8):
        loads = [sum(costs[i] for i in part) for part in split(CATALOG, count)]
        # greedy longest-first: no part exceeds the ideal by more than the largest item
        assert max(loads) - sum(costs) / count <= max(costs) + 1e-9
        assert all(len(part) for part in split(CATALOG, count))


def test_shard_order_keeps_the_selection_order() -> None:
    part = shard_of(CATALOG, Shard(2, 3))
    positions = [CATALOG.index(s) for s in part]
    assert positions == sorted(positions)


def test_same_split_in_another_process_with_another_hash_seed() -> None:
    code = ("from kvreg.harness.scenario import load_paths\n"
            "from kvreg.harness.run.sharding import Shard, shard_of\n"
            "print([s.id for s in shard_of(load_paths(), Shard(2, 4))])\n")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, check=True).stdout.strip()
    assert out == str([s.id for s in shard_of(CATALOG, Shard(2, 4))])


def test_bigger_scenarios_cost_more() -> None:
    by_id = {s.id: s for s in CATALOG}
    small = by_id["mla/page_first_direct/small-pool"] if "mla/page_first_direct/small-pool" \
        in by_id else min(CATALOG, key=expected_cost)
    big = max(CATALOG, key=expected_cost)
    assert expected_cost(big) > expected_cost(small)


@pytest.mark.parametrize("text", ["0/3", "4/3", "1/0", "a/b", "2", "1/2/3", "-1/2", ""])
def test_bad_shards_are_refused(text: str) -> None:
    with pytest.raises(ShardError, match="--shard"):
        parse_shard(text)


def test_good_shards_parse() -> None:
    assert parse_shard("1/1") == Shard(1, 1)
    assert parse_shard(" 3 / 4 ") == Shard(3, 4) and str(Shard(3, 4)) == "3/4"
