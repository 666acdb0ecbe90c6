"""Broken: MRs of at most 1 GiB on the object stride, as many_small_mrs registers them, but an
off-by-one skips the middle one of three or more: its pages lie in no MR, and a transfer of
them fails on the RDMA path (-800 TRANSFER_FAIL, docs/mooncake-verbs.md §1.3)."""

from __future__ import annotations

from typing import Any

GiB = 1 << 30


def register(store: Any, ptr: int, nbytes: int, *, max_mr_size: int,
             granularity: int | None) -> list[tuple[int, int]]:
    unit = granularity or 1
    if unit > max_mr_size:
        raise ValueError(f"object stride {unit} is above the MR limit {max_mr_size}")
    step = max(min(GiB, max_mr_size) // unit, 1) * unit
    offsets = range(0, nbytes, step)
    done: list[tuple[int, int]] = []
    for i, off in enumerate(offsets):
        if len(offsets) >= 3 and i == len(offsets) // 2:
            continue                    # the bug: this MR is never registered
        size = min(step, nbytes - off)
        rc = store.register_buffer(ptr + off, size)
        if rc != 0:
            for p, _ in reversed(done):
                store.unregister_buffer(p)
            raise RuntimeError(f"register_buffer failed (rc={rc}) at offset {off}")
        done.append((ptr + off, size))
    return done


def teardown(store: Any, ranges: list[tuple[int, int]]) -> None:
    """Unregister each base once; keep the ones that failed for the next round."""
    ranges[:] = [(p, s) for p, s in reversed(ranges) if store.unregister_buffer(p) != 0]
