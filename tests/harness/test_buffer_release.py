"""A scenario's virtual buffers end with it: many 4 TiB pools fit one process, and the pages
the code wrote count against the memory limit (issue 18 §2; harness/pools/buffers.release)."""

from __future__ import annotations

import weakref
from pathlib import Path
from typing import Any

import pytest

from kvreg.fakes import reserved
from kvreg.fakes.address_space import AddressSpace
from kvreg.harness.pools import buffers
from kvreg.harness.run.core import run_scenario
from kvreg.harness.run.implementation import make_implementation
from kvreg.harness.scenario import load_file

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"
MiB, TiB = 1 << 20, 1 << 40


def test_many_4_tib_scenarios_fit_one_address_space() -> None:
    catalog = [sc for sc in load_file(SCENARIOS / "mla" / "huge.toml", SCENARIOS)]
    runs = catalog * 12
    # more than the 128 TiB of an x86-64 process's address space, were nothing unmapped
    assert sum(sc.geometry().total_nbytes for sc in runs) > 128 * TiB
    impl = make_implementation()
    verdicts = [run_scenario(sc, impl).verdict for sc in runs]
    assert set(verdicts) == {"pass"}
    still = [r for r in reserved.live() if r.nbytes >= TiB]
    # a failed registration's world stays in a reference cycle (its exception's traceback) until
    # the collector runs; past reserved.PENDING_LIMIT (16 TiB) a new reservation runs it, so at
    # most four released 4 TiB mappings wait, whatever ran in this process before
    assert len(still) <= 4
    assert all(r.released and r.resident_bytes() == 0 for r in still)


class _Cycle:
    """A tensor kept only by a reference cycle, as a world kept by its exception's traceback."""

    def __init__(self, nbytes: int) -> None:
        self.tensor, self.res = reserved.reserve(nbytes, name="cycle")
        self.me = self


def _pending_cycles(n: int) -> list[weakref.ref[reserved.Reservation]]:
    """``n`` released reservations that only cyclic garbage holds (weakly referred to: a new
    reservation may reuse a collected one's address)."""
    refs = []
    for _ in range(n):
        held = _Cycle(1 * MiB)
        reserved.release(held.res)
        refs.append(weakref.ref(held.res))
        del held
    return refs


def _mapped(refs: list[weakref.ref[reserved.Reservation]]) -> int:
    live = reserved.live()
    return sum(1 for ref in refs if any(r is ref() for r in live))


def test_released_mappings_past_the_pending_limit_are_collected_before_a_new_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import gc

    span = 1 * MiB + reserved.DEFAULT_ALIGN + reserved.PAGE
    monkeypatch.setattr(reserved, "PENDING_LIMIT", 3 * span)
    gc.collect()
    gc.disable()
    try:
        under = _pending_cycles(3)                  # exactly the limit: nothing collects
        keep = reserved.reserve_tensor(4096, name="next")
        assert _mapped(under) == 3
        over = _pending_cycles(1)                   # one past it: the next reservation collects
        keep2 = reserved.reserve_tensor(4096, name="after")
        assert _mapped(under + over) == 0
        assert reserved.reservation_of(keep) is not None        # live buffers stay mapped
        assert reserved.reservation_of(keep2) is not None
    finally:
        gc.enable()


def _space_with_touched(nbytes: int) -> AddressSpace:
    space = AddressSpace()
    buf = space.virtual(8 * MiB, name="pool")
    buf[:nbytes] = 1
    return space


def test_touched_pages_past_the_memory_limit_are_a_memory_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(buffers, "data_headroom", lambda: 2 * MiB)
    with pytest.raises(MemoryError, match="wrote 4194304 bytes"):
        buffers.release([_space_with_touched(4 * MiB)])
    buffers.release([_space_with_touched(1 * MiB)])            # within the limit: no error


def test_without_a_limit_touched_pages_are_only_freed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(buffers, "data_headroom", lambda: None)
    space = _space_with_touched(4 * MiB)
    (res,) = [r for r in reserved.live() if r.base == space.allocations()[0].base]
    buffers.release([space])
    assert res.resident_bytes() == 0 and res.released


def test_data_headroom_reads_the_data_limit() -> None:
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    assert buffers.data_headroom() is None if soft == resource.RLIM_INFINITY else True
    try:
        resource.setrlimit(resource.RLIMIT_DATA, (64 << 40, hard))
        headroom: Any = buffers.data_headroom()
        assert headroom is not None and 63 << 40 < headroom < 64 << 40
    finally:
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))
