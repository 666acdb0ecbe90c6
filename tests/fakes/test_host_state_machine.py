"""The fake host against a model of sets of pages: pin, unpin, touch, /dev/shm and rank exits.

The model keeps every page explicitly (small sizes), the host keeps ranges in a shared file;
after every step their totals agree. Sizes are a few pages so that the model stays a set.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kvreg.fakes.host.fake_host import FakeHost, OomKilled, RankMemory, SigBus
from kvreg.fakes.host.limits import HostLimits

PAGE = 4096
RAM_PAGES = 64
SHM_PAGES = 24
RANKS = 3
MAP = 1 << 40                  # where each rank maps the shared file
FILE_PAGES = 32

slots = st.integers(0, 15)    # a rank's private pool: 16 slots of 2 pages
ranks = st.integers(0, RANKS - 1)


class HostMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.TemporaryDirectory()
        self.host = FakeHost.create(Path(self.dir.name) / "host.json", HostLimits(
            ram=RAM_PAGES * PAGE, shm=SHM_PAGES * PAGE))
        self.mem: dict[int, RankMemory] = {}
        self.alive: set[int] = set()
        self.anon: dict[int, set[int]] = {}          # rank -> private pages resident
        self.pins: dict[int, dict[int, set[tuple[str, int]]]] = {}   # rank -> base -> pages
        self.shm: set[int] = set()
        self.file = False
        for r in range(RANKS):
            self._start(r)

    def teardown(self) -> None:
        self.dir.cleanup()

    def _start(self, r: int) -> None:
        self.mem[r] = self.host.rank(r)
        self.alive.add(r)
        self.anon[r] = set()
        self.pins[r] = {}
        if self.file:
            self.mem[r].map_shm("kv", MAP, FILE_PAGES * PAGE)

    def _used(self) -> int:
        return sum(len(a) for a in self.anon.values()) + len(self.shm)

    def _pinned(self) -> int:
        pages: set[tuple[object, ...]] = set()
        for r, by_base in self.pins.items():
            for p in by_base.values():
                pages |= {(r, *x) if x[0] == "anon" else x for x in p}
        return len(pages)

    @rule()
    @precondition(lambda self: not self.file)
    def create_file(self) -> None:
        creator = self.mem[min(self.alive)]
        creator.shm_create("kv")
        creator.shm_ftruncate("kv", FILE_PAGES * PAGE)
        self.file = True
        for r in self.alive:
            self.mem[r].map_shm("kv", MAP, FILE_PAGES * PAGE)

    @rule(r=ranks, slot=slots)
    def pin_private(self, r: int, slot: int) -> None:
        base = (slot + 1) * 2 * PAGE
        if r not in self.alive or base in self.pins[r]:
            return
        pages = {("anon", base // PAGE), ("anon", base // PAGE + 1)}
        new = {p for _, p in pages} - self.anon[r]
        before = self._pinned()
        self.pins[r][base] = pages
        fits = self._pinned() <= RAM_PAGES and self._used() + len(new) <= RAM_PAGES
        if not fits:
            del self.pins[r][base]
        assert self.mem[r].pin(base, 2 * PAGE) == (0 if fits else 1)
        if fits:
            self.anon[r] |= new
        else:
            assert self._pinned() == before

    @rule(r=ranks, first=st.integers(0, FILE_PAGES - 1), n=st.integers(1, 6))
    @precondition(lambda self: self.file)
    def pin_shared(self, r: int, first: int, n: int) -> None:
        base = MAP + first * PAGE
        n = min(n, FILE_PAGES - first)
        if r not in self.alive or any(
                b < base + n * PAGE and base < b + len(p) * PAGE
                for b, p in self.pins[r].items() if b >= MAP):
            return
        pages = {("kv", first + i) for i in range(n)}
        new = {p for _, p in pages} - self.shm
        self.pins[r][base] = pages
        fits = (len(self.shm) + len(new) <= SHM_PAGES and self._pinned() <= RAM_PAGES
                and self._used() + len(new) <= RAM_PAGES)
        if not fits:
            del self.pins[r][base]
        assert self.mem[r].pin(base, n * PAGE) == (0 if fits else 1)
        if fits:
            self.shm |= new

    @rule(r=ranks, data=st.data())
    def unpin(self, r: int, data: st.DataObject) -> None:
        if r not in self.alive or not self.pins[r]:
            return
        base = data.draw(st.sampled_from(sorted(self.pins[r])))
        del self.pins[r][base]
        self.mem[r].unpin(base)

    @rule(r=ranks, first=st.integers(0, FILE_PAGES - 1), n=st.integers(1, 8))
    @precondition(lambda self: self.file)
    def touch_shared(self, r: int, first: int, n: int) -> None:
        if r not in self.alive:
            return
        n = min(n, FILE_PAGES - first)
        new = set(range(first, first + n)) - self.shm
        if self._used() + len(new) > RAM_PAGES:
            return                     # the OOM killer's choice is tested elsewhere
        if len(self.shm) + len(new) > SHM_PAGES:
            room = SHM_PAGES - len(self.shm)
            try:
                self.mem[r].touch(MAP + first * PAGE, n * PAGE)
            except SigBus:
                pass
            else:
                raise AssertionError("a touch past what tmpfs holds must be SIGBUS")
            # the pages before the one that failed were faulted in
            for p in range(first, first + n):
                if p not in self.shm:
                    if room == 0:
                        break
                    self.shm.add(p)
                    room -= 1
            return
        self.mem[r].touch(MAP + first * PAGE, n * PAGE)
        self.shm |= new

    @rule(r=ranks, slot=slots)
    def touch_private(self, r: int, slot: int) -> None:
        base = (slot + 1) * 2 * PAGE
        if r not in self.alive:
            return
        new = {base // PAGE, base // PAGE + 1} - self.anon[r]
        try:
            self.mem[r].touch(base, 2 * PAGE)
        except OomKilled:
            assert self._used() + len(new) > RAM_PAGES
        self._sync_kills()
        if r in self.alive:
            self.anon[r] |= new

    def _sync_kills(self) -> None:
        for r in list(self.alive):
            if r in self.host.killed():
                self.alive.discard(r)
                self.anon[r] = set()
                self.pins[r] = {}

    @rule(r=ranks)
    def exit_and_restart(self, r: int) -> None:
        if r in self.alive:
            self.mem[r].exit()
        self.alive.discard(r)
        self.anon[r] = set()
        self.pins[r] = {}
        if r not in self.host.killed():
            self._start(r)

    @invariant()
    def totals_agree(self) -> None:
        t = self.host.totals()
        assert t.anon == sum(len(a) for a in self.anon.values()) * PAGE
        assert t.shm == len(self.shm) * PAGE
        assert t.pinned == self._pinned() * PAGE
        assert t.free == (RAM_PAGES - self._used()) * PAGE


TestHostMachine = HostMachine.TestCase
TestHostMachine.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)
