"""Unregisters interior pointers: correct chunks, but teardown passes the middle of each MR
to ``unregister_buffer``, which wants the exact base address (docs/mooncake-verbs.md §1.5 step 5)
and returns -600 for anything else."""

from __future__ import annotations

from typing import Any


def _chunks(nbytes: int, max_mr_size: int, granularity: int | None) -> list[tuple[int, int]]:
    """(offset, size) of MRs at most ``max_mr_size``, seams on multiples of the stride."""
    unit = granularity or 1
    if unit > max_mr_size:
        raise ValueError(f"object stride {unit} is above the MR limit {max_mr_size}")
    step = max_mr_size // unit * unit
    return [(off, min(step, nbytes - off)) for off in range(0, nbytes, step)]


def register(store: Any, ptr: int, nbytes: int, *, max_mr_size: int,
             granularity: int | None) -> list[tuple[int, int]]:
    done: list[tuple[int, int]] = []
    for off, size in _chunks(nbytes, max_mr_size, granularity):
        rc = store.register_buffer(ptr + off, size)
        if rc != 0:
            for p, _ in reversed(done):
                store.unregister_buffer(p)
            raise RuntimeError(f"register_buffer failed (rc={rc}) at offset {off}")
        done.append((ptr + off, size))
    return done


def teardown(store: Any, ranges: list[tuple[int, int]]) -> None:
    for chunk_ptr, size in ranges:
        store.unregister_buffer(chunk_ptr + size // 2)
    ranges.clear()
