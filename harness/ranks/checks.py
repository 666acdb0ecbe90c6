"""The rules only several ranks can break, judged on what every rank reported and on the
host they share (docs/ranks.md §3).

- ``ranks-incoherent``: register returned on every rank, but the pool is pinned on some
  ranks and not on others (vLLM #51762: a rank warns and goes on unpinned while its peers
  are pinned; PR #52296 proposes an all-or-nothing, rank-ordered registration).
- ``host-overcommitted``: register returned on every rank, though the pools the ranks hold
  together exceed what the host can hold: nothing refused it, so the engine starts and the
  host runs out as the pools fill (SGLang #38156, PR #40135's MIN all-reduce).
- ``shm-leaked``: a /dev/shm file the run created is still there after teardown, or after
  a rank died: its pages stay charged and a restart that creates the same name with
  O_EXCL fails with EEXIST (vLLM #51579, #54002, PR #52596).

They are the cuda target's rules (the one target with ranks), registered under
:data:`RANKS_TARGET` so that a single process's checks never run them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvreg.fakes.host.limits import HostLimits
from kvreg.harness.run.result import Violation
from kvreg.harness.run.rules import (
    ORDER_RELEASE,
    ORDER_TRANSFER,
    SITE_END,
    TEARDOWN,
    VIOLATION,
    rule,
    run_rules,
)

__all__ = ["RANKS_TARGET", "RanksRun", "check_ranks", "demand_and_capacity"]

RANKS_TARGET = "cuda/ranks"      # the cuda target, across its ranks
_DOC = "docs/ranks.md §3"


@dataclass
class RanksRun:
    """What the ranks of one scenario reported, and the host after them."""

    world_size: int
    facts: dict[int, dict[str, Any]]      # rank -> its facts (ranks that were judged)
    dead: dict[int, str]                  # rank -> what ended its process
    host: dict[str, Any]                  # the HostLimits' keyword arguments
    shared: bool
    shm_left: dict[str, dict[str, Any]] = field(default_factory=dict)   # after the run

    @property
    def all_returned(self) -> bool:
        return (not self.dead and len(self.facts) == self.world_size
                and all(f["returned"] for f in self.facts.values()))


def _size(n: int) -> str:
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20)):
        if n >= size:
            return f"{n / size:.4g} {unit}"
    return f"{n} bytes"


def _ranks(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def _state(f: dict[str, Any]) -> str:
    if f["registered"] <= 0:
        return "none"
    return "all" if f["registered"] >= f["pool_bytes"] else "part"


@rule("ranks-incoherent", target=RANKS_TARGET, doc=_DOC, site=SITE_END, summary=(
    "register returned on every rank, but the pool is pinned on some ranks and not on others "
    "(pinned wholly on some, partly or not at all on others): the unpinned ranks copy on the "
    "pageable path while their peers are pinned (vLLM #51762); agree on one outcome (an "
    "all-reduce of success, a rollback everywhere). Judged under `pinning = \"required\"` "
    "and `\"optional\"` alike"))
def _incoherent(c: RanksRun) -> list[Violation]:
    if not c.all_returned:
        return []
    states = {r: _state(f) for r, f in sorted(c.facts.items())}
    if len(set(states.values())) < 2:
        return []
    pinned = [r for r, s in states.items() if s == "all"]
    rest = [r for r, s in states.items() if s != "all"]
    detail = "; ".join(f"rank {r} registered {_size(c.facts[r]['registered'])} of "
                       f"{_size(c.facts[r]['pool_bytes'])}" for r in rest)
    head = (f"register returned on every rank, but {_ranks(pinned)} hold the pool pinned and "
            if pinned else "register returned on every rank, but the ranks hold the pool "
            "pinned to different extents: ")
    return [Violation("ranks-incoherent", head + f"{detail}: those ranks copy on the pageable "
                      "path while their peers are pinned (vLLM #51762); agree on one outcome "
                      "across ranks (an all-reduce of success, then a rollback everywhere or "
                      "a raise)", ORDER_TRANSFER - 2)]


def demand_and_capacity(c: RanksRun) -> tuple[int, int, str]:
    """(what the ranks' pools need together, what the host can hold, what limits it)."""
    pools = [f["pool_bytes"] for f in c.facts.values()]
    demand = max(pools, default=0) if c.shared else sum(pools)
    host = HostLimits(**c.host)
    stale = sum(size for _, size in host.stale_shm)   # a crashed run's files: resident
    limits = [(host.ram - host.other_used - host.reserve - stale,
               "RAM less what the rest of the host uses")]
    if host.cgroup_memory_max is not None:
        limits.append((host.cgroup_memory_max - stale, "the cgroup's memory.max"))
    if c.shared:
        limits.append((host.shm_size - stale, "the size of /dev/shm" + (
            " less the files a crashed run left in it" if stale else "")))
    capacity, what = min(limits)
    return demand, capacity, what


@rule("host-overcommitted", target=RANKS_TARGET, doc=_DOC, site=SITE_END, summary=(
    "register returned on every rank, though the pools the ranks hold together (each rank's "
    "pool, or one shared region) exceed what the host can hold (its RAM less what else uses "
    "it, the cgroup's `memory.max`, `/dev/shm` for a shared region): nothing refused it, so "
    "the engine starts and the host runs out as the pools fill (SGLang #38156); a rank "
    "whose pin the host refused raises, or the ranks agree on a budget first (a MIN "
    "all-reduce, SGLang PR #40135)"))
def _overcommitted(c: RanksRun) -> list[Violation]:
    if not c.all_returned:
        return []
    demand, capacity, what = demand_and_capacity(c)
    if demand <= capacity:
        return []
    pools = ("one shared region of " + _size(demand) if c.shared else
             f"{c.world_size} pools of {_size(demand // max(c.world_size, 1))}")
    return [Violation("host-overcommitted", f"register returned on every rank, but the ranks "
                      f"hold {pools} ({_size(demand)}) on a host that holds {_size(capacity)} "
                      f"({what}): nothing refused it, so the engine starts and the host runs "
                      "out as the pools fill; raise where the host refuses a pin, or agree "
                      "on a budget across ranks before pinning (a MIN all-reduce, SGLang PR "
                      "#40135)", ORDER_TRANSFER - 1)]


@rule("shm-leaked", target=RANKS_TARGET, doc=_DOC, site=SITE_END, judges=(TEARDOWN,),
      summary=("no /dev/shm file the run created is left after teardown, or after a rank "
               "died: its pages stay charged to the host and a restart that creates the "
               "same name with `O_CREAT | O_EXCL` fails with EEXIST (vLLM #51579, #54002); "
               "unlink it once every rank mapped it (vLLM PR #52596)"))
def _shm_leaked(c: RanksRun) -> list[Violation]:
    when = (f"after {_ranks(sorted(c.dead))} died" if c.dead else "after teardown on every "
            "rank")
    return [Violation("shm-leaked", f"/dev/shm/{name} ({_size(f['size'])}, "
                      f"{_size(f['resident'])} resident) is still there {when}: its pages "
                      "stay charged to the host and a restart that creates it with O_EXCL "
                      "fails with EEXIST (vLLM #51579, #54002); unlink it once every rank "
                      "mapped it (vLLM PR #52596)", ORDER_RELEASE + i)
            for i, (name, f) in enumerate(sorted(c.shm_left.items()))]


def check_ranks(run: RanksRun) -> list[Violation]:
    """Every cross-rank violation of ``run``, in the rules' order."""
    return run_rules(RANKS_TARGET, VIOLATION, run)
