"""A correct variant: stride-aligned chunks, rolled back in forward order on failure; the
order of a rollback does not matter to the store, so kvreg must not flag it."""

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
            for p, _ in done:
                store.unregister_buffer(p)
            raise RuntimeError(f"register_buffer failed (rc={rc}) at offset {off}")
        done.append((ptr + off, size))
    return done


def teardown(store: Any, ranges: list[tuple[int, int]]) -> None:
    """Unregister each base once; keep the ones that failed for the next round."""
    ranges[:] = [(p, s) for p, s in reversed(ranges) if store.unregister_buffer(p) != 0]


# a second teardown retries only what failed: the repeatable-teardown contract, declared
teardown.repeatable = True   # type: ignore[attr-defined]
