"""What the ``kvreg_ranks`` fixture runs inside each rank process: the test's function, with
the rank's fake CUDA process attached to the shared fake host.

Each call builds, in the rank: a ``FakeCuda`` (``torch.cuda.cudart()``, cuda-bindings and
ctypes' libcudart reach it; ``torch.cuda.is_available()`` answers as the device profile, as
on a GPU rank, unless the call says ``cuda_machine=False``) whose ``cudaHostRegister`` pins
this rank's pages on the host (:mod:`kvreg.fakes.cuda.host_pins`); ``/proc/meminfo`` and
the cgroup's files answering from the host (so ``psutil.virtual_memory()`` falls as the
ranks fault pages in); ``/dev/shm`` answering from the host
(:mod:`kvreg.fakes.host.shm_files`). A rank the host's OOM killer
chose ends as the kernel ends it, by SIGKILL, whatever the code was doing: at once when its
own call was the one that did not fit, within ``OOM_POLL_S`` when a peer's was (a watcher
reads the host), so code that catches ``OomKilled`` never runs on as a dead process.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from kvreg.fakes.cuda.fake_cuda import FakeCuda
from kvreg.fakes.cuda.host_pins import attach_host
from kvreg.fakes.host.fake_host import FakeHost, OomKilled, RankMemory
from kvreg.fakes.host.meminfo import patch_host_files
from kvreg.fakes.host.shm_files import patch_shm
from kvreg.harness.ranks.rank_process import resolve

__all__ = ["RankContext", "current", "run_on_host"]


@dataclass(frozen=True)
class RankContext:
    """This rank's fakes while its function runs (:func:`current`)."""

    rank: int
    host: FakeHost
    memory: RankMemory
    fake: FakeCuda


_CURRENT: list[RankContext] = []
OOM_POLL_S = 0.05


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)     # the OOM killer's signal: nothing runs after


def _watch(host: FakeHost, rank: int, done: threading.Event) -> None:
    while not done.wait(OOM_POLL_S):
        if rank in host.killed():
            _die()


def current() -> RankContext:
    """The running rank's fakes, for a function that wants to look at them (its live
    registrations, the host's figures); only inside a ``kvreg_ranks`` call."""
    if not _CURRENT:
        raise RuntimeError("kvreg.harness.plugin.rank_side.current() is only set inside a "
                           "function the kvreg_ranks fixture runs")
    return _CURRENT[-1]


@contextmanager
def _rank_world(host_path: str, profile: str, cuda_machine: bool) -> Iterator[RankContext]:
    rank = int(os.environ["RANK"])
    host = FakeHost(host_path)
    memory = host.rank(rank)
    fake = FakeCuda(profile)
    attach_host(fake, memory)
    context = RankContext(rank, host, memory, fake)
    done = threading.Event()
    watcher = threading.Thread(target=_watch, args=(host, rank, done), daemon=True,
                               name=f"kvreg-oom-watch-{rank}")
    _CURRENT.append(context)
    watcher.start()
    try:
        with fake.patch(cuda_machine=cuda_machine), patch_host_files(host), \
                patch_shm(memory, on_oom="kill"):
            yield context
    finally:
        done.set()
        watcher.join()
        _CURRENT.remove(context)


def run_on_host(host_path: str, spec: str, args: tuple[Any, ...], profile: str,
                cuda_machine: bool = True, setup: str | None = None) -> Any:
    """Run ``spec`` (``module:function``) with ``args`` in this rank, on the host at
    ``host_path``; its value goes back to the test. ``cuda_machine``: torch's device
    queries answer as the profile (a GPU rank), as ``kvreg_cuda_machine`` does. ``setup``
    (``module:function``) runs first, before the fakes answer: imports that probe the
    machine, as a rank's imports run before it initialises CUDA."""
    if setup is not None:
        resolve(setup)()
    try:
        with _rank_world(host_path, profile, cuda_machine):
            return resolve(spec)(*args)
    except OomKilled:
        _die()
        raise
