"""Performance targets of the fake CUDA runtime (ARCHITECTURE.md#performance-targets).

1. cudaHostRegister + cudaHostUnregister with full semantics (validation, overlap check,
   recorder, fault-plan check, torch-face enum) at 100 000 live registrations, against a
   bare recording fake that only appends to a list (target <= 3x) and against
   ``unittest.mock.MagicMock``, what FastDeploy's tests stand in for cudart with. A state
   floor (sorted set + dict + trace row, flat, no validation) is reported beside them: the
   part of the cost that no layering removes.
2. Batch-copy validation: target >= 5 M descriptors/s, vectorised.
Figures are reported, never asserted (2-core machines are noisy).
"""

from __future__ import annotations

from typing import Any
from unittest.mock import MagicMock

import numpy as np
import pytest

from kvreg.fakes.cuda.copies import classify_copy_sides
from kvreg.fakes.cuda.fake_cuda import FakeCuda
from kvreg.fakes.cuda.sorted_bases import SortedBases
from kvreg.harness.run.budget import CallBudget

from .conftest import MEDIANS

LIVE = 100_000
STEP = 1 << 21


class BareRecordingFake:
    """What SGLang's own unit test uses: record the call, return success."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def cudaHostRegister(self, ptr: int, size: int, flags: int) -> int:
        self.calls.append(("cudaHostRegister", ptr, size, flags))
        return 0

    def cudaHostUnregister(self, ptr: int) -> int:
        self.calls.append(("cudaHostUnregister", ptr))
        return 0


class StateFloor:
    """Not a fake: the least state any registry keeps, flat, with no validation or layers.

    A sorted set of bases (the overlap query), a dict of ranges and one trace row per call,
    at the same 100 000 live ranges. It shows how much of the full fake's cost is the
    state itself rather than its layers (reported, never a target).
    """

    def __init__(self, bases: list[int]) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.bases = SortedBases()
        self.ranges: dict[int, int] = {}
        for b in bases:
            self.bases.add(b)
            self.ranges[b] = STEP

    def cudaHostRegister(self, ptr: int, size: int, flags: int) -> int:
        last = self.bases.floor(ptr + size, strict=True)
        code = 712 if last is not None and last + self.ranges[last] > ptr else 0
        if not code:
            self.bases.add(ptr)
            self.ranges[ptr] = size
        self.calls.append(("cudaHostRegister", ptr, size, flags, code))
        return code

    def cudaHostUnregister(self, ptr: int) -> int:
        code = 0 if self.ranges.pop(ptr, None) is not None else 713
        if not code:
            self.bases.remove(ptr)
        self.calls.append(("cudaHostUnregister", ptr, code))
        return code


def _populated() -> tuple[FakeCuda, int]:
    fake = FakeCuda()
    pool = fake.virtual(LIVE * STEP * 2 + STEP, "uint8", name="pool")  # room for "tail"
    base = pool.data_ptr()
    rt = fake.torch
    for i in range(LIVE):
        assert rt.cudaHostRegister(base + 2 * i * STEP, STEP, 0) == 0
    fake.trace.clear()
    return fake, base


def test_register_unregister_bare(benchmark: Any, record_median: Any) -> None:
    bare = BareRecordingFake()
    ptr = 1 << 40

    def cycle() -> None:
        bare.cudaHostRegister(ptr, STEP, 0)
        bare.cudaHostUnregister(ptr)
        if len(bare.calls) > 1_000_000:
            bare.calls.clear()

    benchmark(cycle)
    record_median("register_unregister_bare")


def test_register_unregister_magicmock(benchmark: Any, record_median: Any) -> None:
    cudart = MagicMock()
    cudart.cudaHostRegister.return_value = 0
    cudart.cudaHostUnregister.return_value = 0
    ptr = 1 << 40

    def cycle() -> None:
        cudart.cudaHostRegister(ptr, STEP, 0)
        cudart.cudaHostUnregister(ptr)
        if cudart.cudaHostRegister.call_count > 100_000:
            cudart.reset_mock()

    benchmark(cycle)
    record_median("register_unregister_magicmock")


@pytest.mark.parametrize("where", ["middle", "tail"])
def test_register_unregister_full(benchmark: Any, record_median: Any, where: str) -> None:
    fake, base = _populated()
    rt = fake.torch
    # a gap between two live registrations (middle) or past the last one (tail)
    ptr = base + (LIVE + 1) * STEP if where == "middle" else base + 2 * LIVE * STEP

    def cycle() -> None:
        rt.cudaHostRegister(ptr, STEP, 0)
        rt.cudaHostUnregister(ptr)
        if len(fake.trace) > 1_000_000:
            fake.trace.clear()

    benchmark(cycle)
    assert len(fake.live_registrations()) == LIVE
    record_median("register_unregister_full" + ("" if where == "middle" else "_tail"))


@pytest.mark.parametrize("counting", [True, False])
def test_register_unregister_budgeted(benchmark: Any, record_median: Any,
                                      counting: bool) -> None:
    """The full path as a scenario runs it: the call budget armed on every CUDA point,
    counting (the implementation's calls) or not (kvreg's own copy and check calls)."""
    fake, base = _populated()
    budget = CallBudget(fake.faults, "cudart.*", 1 << 60, "CUDA")
    budget.counting = counting
    rt = fake.torch
    ptr = base + (LIVE + 1) * STEP

    def cycle() -> None:
        rt.cudaHostRegister(ptr, STEP, 0)
        rt.cudaHostUnregister(ptr)
        if len(fake.trace) > 1_000_000:
            fake.trace.clear()

    benchmark(cycle)
    assert len(fake.live_registrations()) == LIVE
    assert (budget.spent > 0) is counting
    record_median("register_unregister_budgeted" + ("" if counting else "_idle"))


def test_register_unregister_state_floor(benchmark: Any, record_median: Any) -> None:
    base = 1 << 40
    floor = StateFloor([base + 2 * i * STEP for i in range(LIVE)])
    ptr = base + (LIVE + 1) * STEP     # the "middle" gap of test_register_unregister_full

    def cycle() -> None:
        floor.cudaHostRegister(ptr, STEP, 0)
        floor.cudaHostUnregister(ptr)
        if len(floor.calls) > 1_000_000:
            floor.calls.clear()

    benchmark(cycle)
    assert len(floor.ranges) == LIVE
    record_median("register_unregister_state_floor")


@pytest.mark.parametrize("n_desc", [1_000_000])
def test_batch_copy_validation(benchmark: Any, n_desc: int) -> None:
    fake = FakeCuda()
    page = 4_497_408
    pool = fake.virtual(n_desc * page, "uint8")
    base = pool.data_ptr()
    chunk = (1 << 30) // page * page
    rt = fake.runtime
    for off in range(0, n_desc * page, chunk):
        rt.cudaHostRegister(base + off, min(chunk, n_desc * page - off), 0)
    _, dev = rt.cudaMalloc(1 << 30)
    srcs = (base + np.arange(n_desc, dtype=np.uint64) * page).astype(np.uint64)
    dsts = np.full(n_desc, dev, np.uint64)
    sizes = np.full(n_desc, page, np.int64)
    fault = benchmark(classify_copy_sides, fake.driver, dsts, srcs, sizes, kind=4, batch=True)
    assert fault is None
    MEDIANS["descriptors_per_s (validation core)"] = n_desc / benchmark.stats.stats.median


def test_batch_copy_face(benchmark: Any) -> None:
    """End to end through cuda.bindings.runtime.cudaMemcpyBatchAsync with numpy arrays."""
    n_desc = 1_000_000
    fake = FakeCuda()
    page = 1 << 20
    pool = fake.virtual(n_desc * page, "uint8")
    base = pool.data_ptr()
    rt = fake.runtime
    for off in range(0, n_desc * page, 64 << 30):
        rt.cudaHostRegister(base + off, min(64 << 30, n_desc * page - off), 0)
    _, dev = rt.cudaMalloc(1 << 30)
    _, stream = rt.cudaStreamCreate()
    attrs = rt.cudaMemcpyAttributes()
    attrs.srcAccessOrder = 1
    srcs = base + np.arange(n_desc, dtype=np.uint64) * page
    dsts = np.full(n_desc, dev, np.uint64)
    sizes = np.full(n_desc, page, np.int64)
    res = benchmark(rt.cudaMemcpyBatchAsync, dsts, srcs, sizes, n_desc, [attrs], [0], 1, stream)
    assert int(res[0]) == 0
    MEDIANS["descriptors_per_s (cudaMemcpyBatchAsync face)"] = n_desc / benchmark.stats.stats.median
