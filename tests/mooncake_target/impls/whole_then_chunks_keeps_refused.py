"""Broken: the whole buffer first, MR-sized chunks on -600, but the refused whole range stays
in the list register returns (it was added before the call). The store registered nothing
for it (docs/mooncake-verbs.md §1.5 step 1), so teardown's unregister of that base releases
the first chunk, and the first chunk's own unregister then hits a base that is no longer
live (-600, §1.5 step 4)."""

from __future__ import annotations

from typing import Any

INVALID_PARAMS = -600


def register(store: Any, ptr: int, nbytes: int, *, max_mr_size: int,
             granularity: int | None) -> list[tuple[int, int]]:
    unit = granularity or 1
    if unit > max_mr_size:
        raise ValueError(f"object stride {unit} is above the MR limit {max_mr_size}")
    ranges = [(ptr, nbytes)]            # the bug: kept even when the store refuses it
    rc = store.register_buffer(ptr, nbytes)
    if rc == 0:
        return ranges
    if rc != INVALID_PARAMS:
        raise RuntimeError(f"register_buffer of the whole buffer failed (rc={rc})")
    step = max_mr_size // unit * unit
    done: list[tuple[int, int]] = []
    for off in range(0, nbytes, step):
        size = min(step, nbytes - off)
        rc = store.register_buffer(ptr + off, size)
        if rc != 0:
            for p, _ in reversed(done):
                store.unregister_buffer(p)
            raise RuntimeError(f"register_buffer failed (rc={rc}) at offset {off}")
        done.append((ptr + off, size))
    return ranges + done


def teardown(store: Any, ranges: list[tuple[int, int]]) -> None:
    """Unregister each range; keep the ones that failed for the next round."""
    ranges[:] = [(p, s) for p, s in ranges if store.unregister_buffer(p) != 0]
