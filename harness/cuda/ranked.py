"""The ``cuda`` target's world in one rank of a many-rank scenario (harness/ranks).

The same world as a single process's (world.py), with the rank's fake CUDA process attached
to its memory on the host the ranks share (fakes/cuda/host_pins.py: cudaHostRegister pins
the host's pages and may be refused as the real driver refuses it, docs/host.md §5), the
host's ``/proc/meminfo`` and cgroup files served while the code runs (so ``psutil`` reads
the host), and, for a ``shared`` pool, every buffer mapped from one /dev/shm file at the
same offsets in every rank. The host's state file is in ``KVREG_FAKE_HOST`` for the code's
run (the path the fake host is opened by). After register, what the rank holds registered
is noted: the cross-rank rules (harness/ranks/checks.py) compare the ranks by it.
"""

from __future__ import annotations

import os
import signal
import time
from contextlib import AbstractContextManager, ExitStack
from typing import TYPE_CHECKING, Any

from kvreg.fakes.cuda.host_pins import attach_host
from kvreg.fakes.host.fake_host import OomKilled, SigBus
from kvreg.fakes.host.meminfo import patch_host_files
from kvreg.harness.run.isolation import env_var
from kvreg.harness.run.target import RankPlace, SkipScenario

from .checks import REGISTER_APIS
from .world import CudaWorld, build_world

if TYPE_CHECKING:
    from kvreg.harness.run.implementation import Implementation
    from kvreg.harness.scenario.format import Scenario

__all__ = ["HOST_ENV", "RankedCudaWorld", "build_rank", "region_layout"]

HOST_ENV = "KVREG_FAKE_HOST"
_PAGE = 4096


def region_layout(nbytes: list[int]) -> tuple[list[int], int]:
    """Each buffer's offset in a shared region (page-aligned, back to back, as mmap needs)
    and the region's size."""
    offsets, pos = [], 0
    for n in nbytes:
        offsets.append(pos)
        pos += -(-n // _PAGE) * _PAGE
    return offsets, pos


class RankedCudaWorld(CudaWorld):
    """One rank's world: see the module doc."""

    place: RankPlace
    registered_after_register = 0      # bytes live after register, kvreg's note

    def attach(self, place: RankPlace) -> None:
        """Attach the fake to the rank's host memory; map the shared region's buffers."""
        self.place = place
        self._filled = self._fills_met = False     # the fill's meeting (fill, _fills_ended)
        attach_host(self.fake, place.memory)
        self._maps: list[int] = []
        if place.shared is None:
            if place.memory.host.limits.refusal_order == "rank":   # docs/host.md §5
                place.memory.claim(sum(int(b.numel()) * int(b.element_size())
                                       for b in self.buffers))
            return
        memory, name = place.memory, place.shared
        sizes = [int(b.numel()) * int(b.element_size()) for b in self.buffers]
        offsets, total = region_layout(sizes)
        with memory.host.state.batch():              # one transaction for the region
            memory.shm_create(name, exclusive=False)  # the first rank creates it
            memory.shm_ftruncate(name, total)
            for buffer, offset, size in zip(self.buffers, offsets, sizes, strict=True):
                if size:
                    memory.map_shm(name, int(buffer.data_ptr()), size, offset)
                    self._maps.append(int(buffer.data_ptr()))

    def isolation(self) -> AbstractContextManager[Any]:
        stack = ExitStack()
        stack.enter_context(super().isolation())
        stack.enter_context(patch_host_files(self.place.memory.host))
        stack.enter_context(env_var(HOST_ENV, self.place.host_path))
        return stack

    def register(self, impl: Implementation) -> bool:
        returned = super().register(impl)
        self.registered_after_register = sum(r.size for r in self.fake.live_registrations())
        if "fill" in self.sc.exercise:
            # until every rank's fill has ended a rank the OOM killer takes learns it at the
            # fill's meeting (_fills_ended), not by a SIGKILL from the rank whose fill did not
            # fit; and every rank's register has ended before any rank fills: which rank the
            # OOM killer takes (the most resident) must not depend on how far a slower peer
            # had got with its pins when a refused rank began to fill
            self.place.memory.set_pid(None)
            self.place.memory.host.rendezvous("registered", self.place.world_size,
                                              _meet_s(), rank=self.place.rank)
        return returned

    def fill(self) -> None:
        """The engine's first fill of its pool: every page this rank has not faulted yet
        faults in on the host (a pinned pool is resident already). Where the host cannot
        hold them the OOM killer takes the rank with the most resident memory, by SIGKILL
        once every rank's fill has ended (:meth:`_fills_ended`); a /dev/shm page tmpfs
        cannot allocate is SIGBUS (docs/host.md §1, §2). The ranks fill one after another,
        in rank order: on a real host their faults interleave as the scheduler has it, and
        which fault finds the memory gone (the kill's message, and where a rank's pages
        were partly resident its victims) with them; kvreg takes one order, so that the
        victims are a function of the scenario."""
        memory, filled = self.place.memory, self.place.memory.host.meeting("filled")
        filled.wait(_meet_s(), ranks=range(self.place.rank))
        try:
            for buffer in self.buffers:
                size = int(buffer.numel()) * int(buffer.element_size())
                if size:
                    memory.touch(int(buffer.data_ptr()), size)
        except OomKilled:
            pass        # the host took this rank: it ends once every rank's fill has ended
        except SigBus:
            signal.signal(signal.SIGBUS, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGBUS)
        finally:
            self._filled = True
            filled.arrive(self.place.rank)

    def begin_teardown(self) -> None:
        self._fills_ended()
        super().begin_teardown()

    def _fills_ended(self) -> None:
        """Wait until every rank's fill has ended (a rank whose register raised fills
        nothing and arrives here at once). Only then do the host's OOM kills take effect: a
        victim ends by SIGKILL, and a rank that lives on while a peer is gone waits, as an
        engine's rank does in its next collective, until kvreg stops it as torchrun's agent
        would. So the victims are those the host's state names (the most resident when a
        fill did not fit, mm/oom_kill.c's oom_badness), each reported killed, never one
        that had returned before a later rank's fill took it."""
        if "fill" not in self.sc.exercise or self._fills_met:
            return
        self._fills_met = True
        filled, rank = self.place.memory.host.meeting("filled"), self.place.rank
        if not self._filled:
            filled.arrive(rank)
        filled.wait(_meet_s(), parties=self.place.world_size)
        killed = self.place.memory.host.killed()
        if rank in killed:
            os.kill(os.getpid(), signal.SIGKILL)      # the kernel's OOM kill of this rank
        while killed:           # a peer is gone: stopped by kvreg (or named hung past the
            time.sleep(1.0)     # ranks' timeout, never a hang)
        self.place.memory.set_pid(os.getpid())       # a later kill is a SIGKILL at once

    def finish(self) -> None:
        self._fills_ended()       # a run whose call budget ran out in register: no teardown
        super().finish()
        with self.place.memory.host.state.batch():
            for addr in self._maps:      # the rank's mappings close with its pool
                self.place.memory.unmap_shm(addr)
        self._maps = []

    def facts(self) -> dict[str, Any]:
        """What the cross-rank rules read of this rank (plain data)."""
        record = self.record
        return {
            "returned": all(b.error is None for b in record.buffers),
            "raised": any(b.error is not None for b in record.buffers),
            "failed_calls": sum(1 for e in record.trace
                                if e.api in REGISTER_APIS and e.code),
            "pool_bytes": sum(b.spec.nbytes for b in record.buffers),
            "registered": self.registered_after_register,
        }


def _meet_s() -> float:
    from kvreg.harness.ranks.rank_scenario import MEET_S

    return MEET_S


def build_rank(sc: Scenario, impl: Implementation, backend: Any,
               place: RankPlace) -> RankedCudaWorld:
    """Rank ``place.rank``'s world (the fake backend only: a host of TiB is the fake's)."""
    if backend != "fake":
        raise SkipScenario("many-rank scenarios run on the fake host only (backend fake)")
    world = build_world(sc, impl, backend, world=RankedCudaWorld)
    assert isinstance(world, RankedCudaWorld)
    world.attach(place)
    return world
