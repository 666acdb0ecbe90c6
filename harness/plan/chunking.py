"""The planner: chunk lists and seam checks, computed without registering anything.

A chunk plan cuts ``[0, total)`` into calls no larger than the limit, every seam on a
multiple of the unit, so no transfer extent crosses a seam (pools.md §1.1, §5.2). The same
module answers the question an operator has before touching a machine: under a given
(possibly wrong) chunking, which pages would straddle a seam?
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from kvreg.harness.pools import BufferSpec, PoolGeometry
from kvreg.harness.pools.base import PageExtents

__all__ = ["ALGORITHMS", "BufferPlan", "ChunkPlan", "PlanError", "PoolPlan", "chunk_size",
           "plan_chunks", "plan_pool", "straddling"]

GiB = 1 << 30

Algorithm = Literal["reference", "upstream", "byte-offset"]
ALGORITHMS: tuple[Algorithm, ...] = ("reference", "upstream", "byte-offset")


class PlanError(ValueError):
    """A chunking that cannot be planned: non-positive unit, unit above the limit, ..."""


def chunk_size(limit: int, unit: int | None) -> int:
    """The largest multiple of ``unit`` not above ``limit`` (``limit`` when unit is None).

    Rejected before any call is made, as SGLang does (pools.md §1.1): a non-positive unit,
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
        return np.array([off for off, _ in self.chunks[1:]], dtype=np.int64)


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
    straddles: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    # rows of the pool's PageExtents (global row numbers) that cross a seam of this buffer
    note: str = ""

    def as_dict(self, extents: PageExtents | None = None, limit_rows: int = 20) -> dict[str, Any]:
        rows = []
        if extents is not None:
            for r in self.straddles[:limit_rows]:
                off, size = int(extents.offset[r]), int(extents.size[r])
                seam = int(self.plan.seams[np.searchsorted(self.plan.seams, off, side="right")])
                rows.append({"page": int(extents.page[r]), "offset": off, "size": size,
                             "seam": seam})
        return {
            "buffer": self.spec.name, "nbytes": self.spec.nbytes,
            "upstream_granularity": self.spec.granularity, "copy_unit": self.spec.copy_unit,
            "unit": self.unit, "chunk": self.plan.chunks[0][1] if self.plan.chunks else None,
            "calls": self.plan.calls, "largest": self.plan.largest,
            "seams": [int(s) for s in self.plan.seams[:limit_rows]],
            "straddling_extents": len(self.straddles), "first_straddles": rows,
            "note": self.note,
        }


@dataclass
class PoolPlan:
    """A whole pool under one algorithm."""

    geometry: PoolGeometry
    algorithm: Algorithm
    limit: int
    buffers: list[BufferPlan]
    extents: PageExtents | None

    @property
    def calls(self) -> int:
        return sum(b.plan.calls for b in self.buffers)

    @property
    def largest(self) -> int:
        return max((b.plan.largest for b in self.buffers), default=0)

    @property
    def straddling_count(self) -> int:
        return sum(len(b.straddles) for b in self.buffers)

    def over_ceiling(self, ceiling: int | None) -> int:
        """Calls at or above a per-call ceiling (512 GiB on R580+: cuda-runtime.md §2.2)."""
        if ceiling is None:
            return 0
        return sum(1 for b in self.buffers for _, s in b.plan.chunks if s >= ceiling)

    def as_dict(self, limit_rows: int = 20) -> dict[str, Any]:
        return {
            "pool_type": self.geometry.pool_type, "layout": self.geometry.layout,
            "algorithm": self.algorithm, "chunk_limit": self.limit, "calls": self.calls,
            "largest": self.largest, "straddling_extents": self.straddling_count,
            "buffers": [b.as_dict(self.extents, limit_rows) for b in self.buffers],
        }


def reference_unit(spec: BufferSpec, limit: int, extents: PageExtents | None,
                   index: int) -> tuple[int, str]:
    """The seam unit kvreg's reference uses for a buffer, and why.

    The copy unit, when it fits the limit. Otherwise (a layer slab larger than the limit)
    the largest page-extent size of this buffer that divides the copy unit: runs of the
    direct layer_first copy may then cross a seam, which the note says (pools.md §5.2).
    """
    if spec.copy_unit <= limit:
        return spec.copy_unit, ""
    if extents is not None and len(extents):
        sizes = extents.size[extents.buffer == index]
        if len(sizes):
            unit = int(np.max(sizes))
            if unit <= limit and spec.copy_unit % unit == 0:
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
    extents = geometry.page_extents() if geometry.has_page_meta else None
    plans: list[BufferPlan] = []
    for i, spec in enumerate(geometry.buffers()):
        if not spec.cuda_registered:
            continue
        note = ""
        if algorithm == "reference":
            unit: int | None
            unit, note = reference_unit(spec, limit, extents, i)
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
        if extents is not None:
            rows = np.nonzero(extents.buffer == i)[0]
            hit = straddling(plan.seams, extents.offset[rows], extents.size[rows])
            bp.straddles = rows[hit]
        plans.append(bp)
    return PoolPlan(geometry, algorithm, limit, plans, extents)
