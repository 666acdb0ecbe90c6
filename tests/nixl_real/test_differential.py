"""The NIXL differential suite: seeded call sequences on two real nixl-cu12 1.5.1 agents
(UCX over DRAM, in a child process) and on two fake ones (profile ``ucx-host``: the wheel's
UCX on a machine without a GPU), compared call by call (realhw/nixl_diff.py).

Each seed is 40 calls: registrations with zero-length, overlapping and duplicate descriptors
as tuples, numpy rows and tensors, VRAM and no memory type; deregistration of returned
lists, of lists never registered and twice; metadata loaded, reloaded, removed, garbage and
the agent's own; ``initialize_xfer`` and prepared lists with ``make_prepped_xfer`` inside,
across and outside registrations, to the peer, to the agent itself and to an agent never
loaded; handles posted after the peer was removed or deregistered. Results, exceptions
(type and first line) and both buffers' bytes must be equal, or the difference must be one
of ``DIVERGENCES`` (docs/nixl.md §7). Deterministic: ``random.Random(seed)``.
"""

from __future__ import annotations

from typing import Any

import pytest

from kvreg.realhw.nixl_diff import DIVERGENCES, SECTIONS, SECTIONS_SEED, NixlDifferential

from ..helpers.nixl_pair import LENGTH, SEEDS

pytestmark = pytest.mark.kvreg_nixl_real


def test_every_call_agrees_or_is_named(real_run: dict[str, Any] | None,
                                       record_property: Any) -> None:
    assert real_run is not None
    diff = NixlDifferential("ucx-host")
    for seed in SEEDS:
        diff.add(seed, LENGTH, real_run["results"][str(seed)])
    result = diff.result
    record_property("nixl_differential", result.summary())
    assert result.unexplained == [], "\n\n".join(result.unexplained[:3])
    assert result.calls == len(SEEDS) * LENGTH          # every sequence ran to its end
    assert set(result.named) <= {d.name for d in DIVERGENCES}
    # the sequences reach transfers that move bytes, not only refusals
    done = sum(1 for seed in SEEDS for r in real_run["results"][str(seed)]
               if r[0] == "done" and r[1] == "DONE")
    print(result.summary(), f"{done} transfers DONE", dict(sorted(result.by_call.items())))
    assert done >= 20


def test_a_refused_list_leaves_what_the_real_agent_leaves(
        real_run: dict[str, Any] | None) -> None:
    # docs/nixl.md §3.3: a refusal into no DRAM section leaves an empty one that the next
    # registration fills; beside a registration it is rolled back and the metadata stays
    # whole; after the only list was deregistered the peer's reloads fail for good
    assert real_run is not None
    real = real_run["results"][str(SECTIONS_SEED)]
    diff = NixlDifferential("ucx-host")
    result = diff.add(SECTIONS_SEED, len(SECTIONS), real)
    assert result.unexplained == [], "\n\n".join(result.unexplained)
    assert result.calls == result.agreeing == len(SECTIONS)
    outcomes = [r[1] if r[0] == "raise" else r[0] for r in real]
    assert outcomes == [
        "nixlBackendError", "ok", "ok", "ok", "done", "nixlBackendError", "ok",
        "nixlNotFoundError", "done", "nixlBackendError", "ok", "nixlBackendError",
        "nixlNotFoundError", "nixlInvalidParamError", "nixlNotFoundError"], real
