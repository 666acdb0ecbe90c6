"""Never unregisters (FastDeploy's ``close`` is a no-op, docs/mooncake-verbs.md §2.1): correct,
stride-aligned chunks with rollback, but teardown releases nothing, so every MR stays pinned
until the process exits."""

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
    """Nothing: the store is expected to clean up at exit."""
