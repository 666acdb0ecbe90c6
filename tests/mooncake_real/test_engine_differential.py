"""The transfer engine's differential suite: seeded call sequences on two real
``mooncake.engine.TransferEngine`` objects and on two fake ones (P2P handshake, tcp).

Each seed is 40 engine calls (single and batch registration with zero-length, overlapping
and duplicate entries; unregister of bases, interiors and unknown addresses; sync, batch,
async and submitted transfers to the peer, to the engine itself and to an address nobody
serves; ``get_first_buffer_address``; managed buffers; the byte helpers). Return values
and both buffers' bytes must be equal call by call, or the difference must be one of
``DIVERGENCES`` (docs/mooncake-verbs.md §8.8). Deterministic: ``random.Random(seed)``.
The unpooled run (``MC_TCP_ENABLE_CONNECTION_POOL=0``) compares every byte; the pooled
run (the wheel's default) compares codes everywhere and bytes until a failed batch.
"""

from __future__ import annotations

from typing import Any

import pytest

from kvreg.fakes.mooncake import get_store_profile
from kvreg.fakes.mooncake.engine_state import EngineState
from kvreg.realhw.mooncake_engine_diff import (
    DIVERGENCES,
    EngineComparison,
    EngineDifferential,
    generate,
)

pytestmark = pytest.mark.kvreg_mooncake_real

SEEDS = range(24)
POOLED_SEEDS = range(4)
LENGTH = 40
PROFILE = get_store_profile("v0.3.13")


def _differential(module: Any, profile: Any = PROFILE, *, pooled: bool = False) -> Any:
    from kvreg.realhw.mooncake_netns import tier_host

    return EngineDifferential(module, tier_host(), profile, pooled=pooled)


def test_generated_sequences_are_deterministic_and_varied() -> None:
    assert generate(7, LENGTH) == generate(7, LENGTH)
    names = {op.name for seed in SEEDS for op in generate(seed, LENGTH)}
    assert names == {"register", "unregister", "batch_register", "batch_unregister", "write",
                     "read", "batch_write", "batch_read", "async_write", "async_read",
                     "submit_write", "first_buffer", "managed", "bytes", "opcode_write"}
    targets = {op.args[0] for seed in SEEDS for op in generate(seed, LENGTH)
               if op.name in ("write", "read", "batch_write")}
    assert targets == {"a", "b", "nobody"}


def _check(result: EngineComparison, record_property: Any, key: str, seeds: range) -> None:
    record_property(key, result.summary())
    print(result.summary(), dict(sorted(result.by_call.items())))
    assert result.unexplained == [], "\n\n".join(result.unexplained[:3])
    assert result.calls == len(seeds) * LENGTH          # every sequence ran to its end
    assert set(result.named) <= {d.name for d in DIVERGENCES}


def test_every_call_agrees_unpooled(engine_module: Any, record_property: Any) -> None:
    diff = _differential(engine_module)
    for seed in SEEDS:
        diff.run(seed, LENGTH)
    _check(diff.result, record_property, "mooncake_engine_differential", SEEDS)
    assert diff.result.named == {}                     # no divergence without the pool


def test_every_call_agrees_or_is_named_pooled(engine_module: Any,
                                              record_property: Any) -> None:
    diff = _differential(engine_module, pooled=True)
    for seed in POOLED_SEEDS:
        diff.run(seed, LENGTH)
    _check(diff.result, record_property, "mooncake_engine_differential_pooled", POOLED_SEEDS)


@pytest.mark.parametrize(("field", "value"), [
    ("engine_batch_validates", False),          # before #2854: a zero-length entry is 0
    ("engine_batch_propagates_errors", False),  # before #2869: unknown address unregisters 0
])
def test_a_fake_with_one_fact_wrong_is_caught(engine_module: Any, field: str,
                                              value: Any) -> None:
    # the suite can fail: a fake with one behaviour reverted disagrees somewhere
    diff = _differential(engine_module, PROFILE.replace(**{field: value}))
    for seed in SEEDS:
        diff.run(seed, LENGTH)
        if diff.result.unexplained:
            break
    assert diff.result.unexplained, f"{field}={value!r} went unnoticed"


def test_a_fake_without_the_segment_cache_is_caught(engine_module: Any,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # get_first_buffer_address reads the peer's descriptor as first seen (§8.5); a fake
    # that reads the live one disagrees
    monkeypatch.setattr(EngineState, "first_buffer",
                        lambda self, dep, name: (dep.engine_segments[name].segment
                                                 .first_address()
                                                 if name in dep.engine_segments else 0))
    diff = _differential(engine_module)
    for seed in SEEDS:
        diff.run(seed, LENGTH)
        if diff.result.unexplained:
            break
    assert any("first_buffer" in u.splitlines()[0] for u in diff.result.unexplained)
