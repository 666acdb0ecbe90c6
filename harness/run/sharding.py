"""``--shard K/N``: split a scenario selection into N parts a CI matrix runs in parallel.

The split depends only on the scenarios' content (ids and what they will do), never on
the machine, the clock, the order files were found in or Python's hash seed, so every job
of a matrix computes the same partition and together the jobs run every scenario exactly
once. Parts are balanced by expected cost (longest-processing-time first): a scenario costs
more the more registration calls, seams and real bytes it implies, never by wall time.
"""

from __future__ import annotations

import hashlib
import heapq
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

__all__ = ["Shard", "ShardError", "expected_cost", "parse_shard", "shard_of", "split"]

_SHARD = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")
MiB = 1 << 20


class ShardError(ValueError):
    """A --shard value that is not K/N with 1 <= K <= N."""


@dataclass(frozen=True)
class Shard:
    """Part ``index`` (1-based) of ``count``."""

    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def parse_shard(text: str) -> Shard:
    """``"2/4"`` -> Shard(2, 4); ShardError says what was expected."""
    m = _SHARD.match(text)
    if not m:
        raise ShardError(f"--shard {text!r}: expected K/N, e.g. 1/4 (part K of N, counted "
                         "from 1)")
    k, n = int(m.group(1)), int(m.group(2))
    if n < 1 or not 1 <= k <= n:
        raise ShardError(f"--shard {text!r}: expected 1 <= K <= N with N >= 1")
    return Shard(k, n)


class _Scenario(Protocol):
    @property
    def id(self) -> str: ...

    @property
    def chunk_limit(self) -> int: ...

    @property
    def memory(self) -> str: ...

    @property
    def exercise(self) -> tuple[str, ...]: ...

    @property
    def faults(self) -> tuple[Any, ...]: ...

    def geometry(self) -> Any: ...


T = TypeVar("T", bound=_Scenario)


def expected_cost(sc: _Scenario) -> float:
    """A machine-independent estimate of what running ``sc`` costs (arbitrary units).

    Registration calls and seams drive the fake's cost (ARCHITECTURE.md#performance-targets:
    costs grow with buffers, calls and seams, never with the page count); real memory costs its
    bytes.
    """
    try:
        specs = [b for b in sc.geometry().buffers()]
    except Exception:   # an impossible geometry is rejected at load; stay total here
        return 1.0
    limit = max(int(sc.chunk_limit), 1)
    calls = sum(max(1, math.ceil(int(b.nbytes) / limit)) for b in specs)
    cost = 1.0 + len(specs) + calls * max(len(sc.exercise), 1) + 0.5 * len(sc.faults)
    if sc.memory == "real":
        cost += sum(int(b.nbytes) for b in specs) / (16 * MiB)
    return cost


def _tiebreak(scenario_id: str) -> str:
    return hashlib.sha256(scenario_id.encode()).hexdigest()


def split(scenarios: Sequence[_Scenario], count: int) -> list[list[int]]:
    """Indices of ``scenarios`` per part (``count`` parts), balanced by expected cost."""
    if count < 1:
        raise ShardError("a split needs at least one part")
    costs = [expected_cost(sc) for sc in scenarios]
    order = sorted(range(len(scenarios)), key=lambda i: (-costs[i], _tiebreak(scenarios[i].id)))
    heap = [(0.0, part) for part in range(count)]
    parts: list[list[int]] = [[] for _ in range(count)]
    for i in order:
        load, part = heapq.heappop(heap)
        parts[part].append(i)
        heapq.heappush(heap, (load + costs[i], part))
    return [sorted(p) for p in parts]


def shard_of(scenarios: Sequence[T], shard: Shard) -> list[T]:
    """The scenarios of one shard, in their original order."""
    return [scenarios[i] for i in split(scenarios, shard.count)[shard.index - 1]]
