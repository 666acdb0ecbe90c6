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
            # every rank's register has ended before any rank fills (FakeHost.rendezvous):
            # which rank the OOM killer takes (the most resident) must not depend on how far
            # a slower peer had got with its pins when a refused rank began to fill
            from kvreg.harness.ranks.rank_scenario import REGISTER_MEET_S

            self.place.memory.host.rendezvous("registered", self.place.world_size,
                                              REGISTER_MEET_S)
        return returned

    def fill(self) -> None:
        """The engine's first fill of its pool: every page this rank has not faulted yet
        faults in on the host (a pinned pool is resident already). Where the host cannot
        hold them the OOM killer takes the rank with the most resident memory, by SIGKILL;
        a /dev/shm page tmpfs cannot allocate is SIGBUS (docs/host.md §1, §2)."""
        memory = self.place.memory
        try:
            for buffer in self.buffers:
                size = int(buffer.numel()) * int(buffer.element_size())
                if size:
                    memory.touch(int(buffer.data_ptr()), size)
        except OomKilled:
            os.kill(os.getpid(), signal.SIGKILL)      # the kernel's OOM kill of this rank
        except SigBus:
            signal.signal(signal.SIGBUS, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGBUS)

    def finish(self) -> None:
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


def build_rank(sc: Scenario, impl: Implementation, backend: Any,
               place: RankPlace) -> RankedCudaWorld:
    """Rank ``place.rank``'s world (the fake backend only: a host of TiB is the fake's)."""
    if backend != "fake":
        raise SkipScenario("many-rank scenarios run on the fake host only (backend fake)")
    world = build_world(sc, impl, backend, world=RankedCudaWorld)
    assert isinstance(world, RankedCudaWorld)
    world.attach(place)
    return world
