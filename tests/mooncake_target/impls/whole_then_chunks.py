"""A correct variant: the whole buffer in one ``register_buffer`` first; on -600
INVALID_PARAMS (released Mooncake's answer to a buffer above the MR limit, which registers
nothing: docs/mooncake-verbs.md §1.5 step 1, §1.6) it registers object-stride-aligned chunks
of at most the MR limit instead, rolling them back if one fails. HEAD accepts the whole
buffer and splits it into MRs itself (§1.6), so there one call does. kvreg must not flag the
rejected first attempt: the store registered nothing and the pool ends fully registered."""

from __future__ import annotations

from typing import Any

INVALID_PARAMS = -600


def _chunks(nbytes: int, max_mr_size: int, granularity: int | None) -> list[tuple[int, int]]:
    """(offset, size) of MRs at most ``max_mr_size``, seams on multiples of the stride."""
    unit = granularity or 1
    step = max_mr_size // unit * unit
    return [(off, min(step, nbytes - off)) for off in range(0, nbytes, step)]


def register(store: Any, ptr: int, nbytes: int, *, max_mr_size: int,
             granularity: int | None) -> list[tuple[int, int]]:
    if granularity and granularity > max_mr_size:
        raise ValueError(f"object stride {granularity} is above the MR limit {max_mr_size}")
    if nbytes == 0:
        return []
    rc = store.register_buffer(ptr, nbytes)
    if rc == 0:
        return [(ptr, nbytes)]
    if rc != INVALID_PARAMS:
        raise RuntimeError(f"register_buffer of the whole buffer failed (rc={rc})")
    done: list[tuple[int, int]] = []
    for off, size in _chunks(nbytes, max_mr_size, granularity):
        rc = store.register_buffer(ptr + off, size)
        if rc != 0:
            for p, _ in reversed(done):
                store.unregister_buffer(p)
            raise RuntimeError(f"register_buffer failed (rc={rc}) at offset {off} "
                               f"size {size} after the whole buffer was refused")
        done.append((ptr + off, size))
    return done


def teardown(store: Any, ranges: list[tuple[int, int]]) -> None:
    """Unregister each base once; keep the ones that failed for the next round."""
    ranges[:] = [(p, s) for p, s in reversed(ranges) if store.unregister_buffer(p) != 0]
