"""The batch copy's device-side test (fakes/cuda/copies.py ``_device_side``) against a plain
reading of its rule: a pointer is device memory when one allocation holds it, and the copy
fits when that allocation also holds its last byte (docs/cuda-runtime.md §5.3). It tests a
few allocations in reach one by one and more by a binary search; both ways must answer as
the rule does, for pointers inside, between, at the ends of and past the allocations, and
for host pointers and device aliases."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvreg.fakes.cuda.copies import _FEW_RANGES, _device_side
from kvreg.fakes.cuda.cuda_driver import ALIAS_OFFSET, DEVICE_BASE
from kvreg.fakes.cuda.fake_cuda import FakeCuda

MiB = 1 << 20


def _rule(ranges: list[tuple[int, int]], ptr: int, size: int) -> tuple[bool, bool]:
    alias = ALIAS_OFFSET <= ptr < DEVICE_BASE
    for base, end in ranges:
        if base <= ptr < end:
            return True, ptr + size <= end
    return alias, alias


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(1, 8), min_size=1, max_size=2 * _FEW_RANGES + 3),
       picks=st.lists(st.tuples(st.integers(0, 40), st.integers(-2, 9),
                                st.one_of(st.integers(1, 3 * MiB), st.sampled_from([0, 1])),
                                st.sampled_from(["device", "host", "alias"])),
                      min_size=1, max_size=40))
def test_the_device_side_answers_as_the_rule(sizes: list[int],
                                             picks: list[tuple[int, int, int, str]]) -> None:
    fake = FakeCuda()
    rt = fake.runtime
    for n in sizes:
        assert int(rt.cudaMalloc(n * MiB)[0]) == 0
    ranges = [(r.base, r.end) for r in fake.driver.device_ranges()]
    ptrs, lens = [], []
    for which, quarter, size, kind in picks:
        if kind == "host":
            ptrs.append((1 << 40) + which * MiB)
        elif kind == "alias":
            ptrs.append(ALIAS_OFFSET + which * MiB)
        else:      # inside, at the start, at the end or past an allocation, by quarters
            base, end = ranges[which % len(ranges)]
            ptrs.append(base + quarter * (end - base) // 4)
            if size in (0, 1):    # to the allocation's last byte exactly, or one byte past
                size = max(end - ptrs[-1], 1) + size
        lens.append(size)
    p = np.array(ptrs, dtype=np.int64)
    n = np.array(lens, dtype=np.int64)
    is_dev, fits = _device_side(fake.driver, p, n)
    want = [_rule(ranges, int(a), int(b)) for a, b in zip(p, n, strict=True)]
    assert is_dev.tolist() == [w[0] for w in want]
    assert fits.tolist() == [w[1] for w in want]
