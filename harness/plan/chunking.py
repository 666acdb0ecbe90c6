"""The planner: chunk lists and seam checks, computed without registering anything.

A chunk plan cuts ``[0, total)`` into calls no larger than the limit, every seam on a
multiple of the unit, so no transfer extent crosses a seam (docs/pools.md §1.1, §5.2). The same
module answers the question an operator has before touching a machine: under a given
(possibly wrong) chunking, which pages would straddle a seam? It answers from the page
extents in closed form (pools/families.py), so the cost grows with buffers and seams, never
with the page count: a plan of 10^12 pages takes as long as one of ten.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from kvreg.harness.pools import BufferSpec, PoolGeometry
from kvreg.harness.pools.base import ExtentFamily
from kvreg.harness.pools.families import (
    SeamHits,
    extent_at,
    max_extent_size,
    straddling_in_buffer,
)

__all__ = ["ALGORITHMS", "BufferPlan", "ChunkPlan", "PlanError", "PoolPlan", "chunk_size",
           "plan_chunks", "plan_pool", "straddling"]

GiB = 1 << 30
FIRST_ROWS = 200   # straddling rows listed per buffer (the count is always exact)

Algorithm = Literal["reference", "upstream", "byte-offset"]
ALGORITHMS: tuple[Algorithm, ...] = ("reference", "upstream", "byte-offset")


class PlanError(ValueError):
    """A chunking that cannot be planned: non-positive unit, unit above the limit, ..."""


def chunk_size(limit: int, unit: int | None) -> int:
    """The largest multiple of ``unit`` not above ``limit`` (``limit`` when unit is None).

    Rejected before any call is made, as SGLang does (docs/pools.md §1.1): a non-positive unit,
    or one above the limit.
    """
    if not isinstance(limit, int) or isinstance(limit, bool) or limit <= 0:
        raise PlanError(f"chunk limit must be a positive int, got {limit!r}")
    if unit is None:
        return limit
    if not isinstance(unit, int) or isinstance(unit, bool):
        raise PlanError(f"registration granularity must be an int, got {unit!r}")
    if unit <= 0:
        raise PlanError(f"registration_granularity_bytes must be positive, got {unit}")
    if unit > limit:
        raise PlanError("Host registration granularity exceeds the configured chunk limit: "
                        f"granularity={unit}, chunk_limit={limit}")
    return (limit // unit) * unit


def plan_chunks(total: int, limit: int, unit: int | None) -> list[tuple[int, int]]:
    """(offset, size) of every call; an empty buffer makes no calls."""
    if total < 0:
        raise PlanError(f"buffer size must be >= 0, got {total}")
    chunk = chunk_size(limit, unit)
    return [(off, min(chunk, total - off)) for off in range(0, total, chunk)]


@dataclass(frozen=True)
class ChunkPlan:
    """The calls for one buffer."""

    total: int
    limit: int
    unit: int | None
    chunks: tuple[tuple[int, int], ...]

    @property
    def calls(self) -> int:
        return len(self.chunks)

    @property
    def largest(self) -> int:
        return max((s for _, s in self.chunks), default=0)

    @property
    def seams(self) -> np.ndarray:
        """Offsets where one registration ends and the next begins."""
        return np.fromiter((off for off, _ in self.chunks[1:]), dtype=np.int64,
                           count=max(len(self.chunks) - 1, 0))


def straddling(seams: np.ndarray, offsets: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Indices of extents ``[offset, offset+size)`` that contain a seam strictly inside."""
    if not len(seams) or not len(offsets):
        return np.zeros(0, np.int64)
    first = np.searchsorted(seams, offsets, side="right")   # first seam after the start
    inside = first < len(seams)
    nxt = seams[np.minimum(first, len(seams) - 1)]
    return np.nonzero(inside & (nxt < offsets + sizes))[0]


@dataclass
class BufferPlan:
    """One buffer of a pool: its spec, the unit used, the plan, and the straddling extents."""

    index: int
    spec: BufferSpec
    unit: int | None
    plan: ChunkPlan
    # page-meta rows of the pool that cross a seam of this buffer: exact count, first rows
    hits: SeamHits = field(default_factory=lambda: SeamHits(0, (), (), "arithmetic"))
    note: str = ""

    @property
    def straddles(self) -> np.ndarray:
        """The first straddling rows (global page-meta row numbers), ascending."""
        return np.array(self.hits.rows, dtype=np.int64)

    @property
    def straddle_count(self) -> int:
        return self.hits.count

    def as_dict(self, families: Sequence[ExtentFamily] | None = None,
                limit_rows: int = 20) -> dict[str, Any]:
        rows = []
        if families is not None:
            for r, seam in list(zip(self.hits.rows, self.hits.seams, strict=True))[:limit_rows]:
                _, off, size, page = extent_at(families, r)
                rows.append({"page": page, "offset": off, "size": size, "seam": seam})
        return {
            "buffer": self.spec.name, "nbytes": self.spec.nbytes,
            "upstream_granularity": self.spec.granularity, "copy_unit": self.spec.copy_unit,
            "unit": self.unit, "chunk": self.plan.chunks[0][1] if self.plan.chunks else None,
            "calls": self.plan.calls, "largest": self.plan.largest,
            "seams": [int(s) for s in self.plan.seams[:limit_rows]],
            "straddling_extents": self.hits.count, "first_straddles": rows,
            "note": self.note,
        }


@dataclass
class PoolPlan:
    """A whole pool under one algorithm."""

    geometry: PoolGeometry
    algorithm: Algorithm
    limit: int
    buffers: list[BufferPlan]
    families: tuple[ExtentFamily, ...] | None   # the page extents in closed form

    @property
    def calls(self) -> int:
        return sum(b.plan.calls for b in self.buffers)

    @property
    def largest(self) -> int:
        return max((b.plan.largest for b in self.buffers), default=0)

    @property
    def straddling_count(self) -> int:
        return sum(b.hits.count for b in self.buffers)

    def over_ceiling(self, ceiling: int | None) -> int:
        """Calls at or above a per-call ceiling (512 GiB on R580+: docs/cuda-runtime.md §2.2)."""
        if ceiling is None:
            return 0
        return sum(1 for b in self.buffers for _, s in b.plan.chunks if s >= ceiling)

    def over_limit(self) -> int:
        """Registrations above the limit the plan was made for: only a plan that ignores it
        (upstream's one call per buffer) has any; under an MR limit each is refused."""
        return sum(1 for b in self.buffers for _, s in b.plan.chunks if s > self.limit)

    def as_dict(self, limit_rows: int = 20) -> dict[str, Any]:
        return {
            "pool_type": self.geometry.pool_type, "layout": self.geometry.layout,
            "algorithm": self.algorithm, "chunk_limit": self.limit, "calls": self.calls,
            "largest": self.largest, "straddling_extents": self.straddling_count,
            "buffers": [b.as_dict(self.families, limit_rows) for b in self.buffers],
        }


def reference_unit(spec: BufferSpec, limit: int, families: Sequence[ExtentFamily] | None,
                   index: int) -> tuple[int, str]:
    """The seam unit kvreg's reference uses for a buffer, and why.

    The copy unit, when it fits the limit. Otherwise (a layer slab larger than the limit)
    the largest page-extent size of this buffer that divides the copy unit: runs of the
    direct layer_first copy may then cross a seam, which the note says (docs/pools.md §5.2).
    """
    if spec.copy_unit <= limit:
        return spec.copy_unit, ""
    unit = max_extent_size(families, index) if families is not None else None
    if unit is not None and unit <= limit and spec.copy_unit % unit == 0:
        return unit, (f"copy unit {spec.copy_unit} exceeds the limit; seams fall on page "
                      f"rows of {unit} bytes, so direct-copy runs that cross a page "
                      "may cross a seam")
    raise PlanError(f"buffer {spec.name}: no seam unit fits the chunk limit {limit} "
                    f"(copy unit {spec.copy_unit})")


def plan_pool(geometry: PoolGeometry, limit: int,
              algorithm: Algorithm = "reference") -> PoolPlan:
    """Plan every CUDA-registered buffer of a pool under one algorithm.

    ``reference``: kvreg's (seams on the copy unit, always chunked). ``upstream``: SGLang's
    merged algorithm (the granularity upstream passes; None -> one call, whatever the size).
    ``byte-offset``: the pre-#36798 bug (seams every ``limit`` bytes).
    """
    if algorithm not in ALGORITHMS:
        raise PlanError(f"unknown algorithm {algorithm!r}; known: {', '.join(ALGORITHMS)}")
    families = geometry.extent_families() if geometry.has_page_meta else None
    plans: list[BufferPlan] = []
    for i, spec in enumerate(geometry.buffers()):
        if not spec.cuda_registered:
            continue
        note = ""
        if algorithm == "reference":
            unit: int | None
            unit, note = reference_unit(spec, limit, families, i)
            chunks = plan_chunks(spec.nbytes, limit, unit)
        elif algorithm == "upstream":
            unit = spec.granularity
            if unit is None:
                chunks = [(0, spec.nbytes)] if spec.nbytes else []
                note = "upstream passes no granularity: one call for the whole buffer"
            else:
                chunks = plan_chunks(spec.nbytes, limit, unit)
        else:
            unit = None
            chunks = plan_chunks(spec.nbytes, limit, None)
        plan = ChunkPlan(spec.nbytes, limit, unit, tuple(chunks))
        bp = BufferPlan(i, spec, unit, plan, note=note)
        if families is not None:
            bp.hits = straddling_in_buffer(families, i, plan.seams, first=FIRST_ROWS)
        plans.append(bp)
    return PoolPlan(geometry, algorithm, limit, plans, families)
