"""Broken: the whole buffer first, MR-sized chunks on -600, but a chunk that fails raises
without releasing the chunks before it: they stay registered (pinned, and counted against
the NIC's MRs) with no handle left to release them (docs/mooncake-verbs.md §1.5)."""

from __future__ import annotations

from typing import Any

INVALID_PARAMS = -600


def register(store: Any, ptr: int, nbytes: int, *, max_mr_size: int,
             granularity: int | None) -> list[tuple[int, int]]:
    unit = granularity or 1
    if unit > max_mr_size:
        raise ValueError(f"object stride {unit} is above the MR limit {max_mr_size}")
    rc = store.register_buffer(ptr, nbytes)
    if rc == 0:
        return [(ptr, nbytes)]
    if rc != INVALID_PARAMS:
        raise RuntimeError(f"register_buffer of the whole buffer failed (rc={rc})")
    step = max_mr_size // unit * unit
    done: list[tuple[int, int]] = []
    for off in range(0, nbytes, step):
        size = min(step, nbytes - off)
        rc = store.register_buffer(ptr + off, size)
        if rc != 0:                     # the bug: no rollback of `done`
            raise RuntimeError(f"register_buffer failed (rc={rc}) at offset {off}")
        done.append((ptr + off, size))
    return done


def teardown(store: Any, ranges: list[tuple[int, int]]) -> None:
    """Unregister each base once; keep the ones that failed for the next round."""
    ranges[:] = [(p, s) for p, s in reversed(ranges) if store.unregister_buffer(p) != 0]
