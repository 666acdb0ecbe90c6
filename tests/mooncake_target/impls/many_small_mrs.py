"""A correct variant: MRs of at most 1 GiB whatever the limit allows (a pool of 4 TiB becomes
about 4 097 MRs), each seam on the object stride, rolled back in reverse on failure. Many
small MRs are legal (docs/mooncake-verbs.md §1.5: one MR per device per registration); kvreg
must judge them, at the cost of their seams, within its time limit."""

from __future__ import annotations

from typing import Any

GiB = 1 << 30


def register(store: Any, ptr: int, nbytes: int, *, max_mr_size: int,
             granularity: int | None) -> list[tuple[int, int]]:
    unit = granularity or 1
    if unit > max_mr_size:
        raise ValueError(f"object stride {unit} is above the MR limit {max_mr_size}")
    step = max(min(GiB, max_mr_size) // unit, 1) * unit
    done: list[tuple[int, int]] = []
    for off in range(0, nbytes, step):
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
