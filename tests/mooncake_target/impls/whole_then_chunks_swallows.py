"""Broken: the whole buffer first, MR-sized chunks on -600, but a chunk that fails is only
logged: register returns the chunks before it, so the pool's later pages lie in no MR and
a real transfer of them fails (docs/mooncake-verbs.md §1.3)."""

from __future__ import annotations

import logging
from typing import Any

INVALID_PARAMS = -600
log = logging.getLogger(__name__)


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
        if rc != 0:
            log.error("register_buffer chunk at offset %d failed: rc=%d", off, rc)
            break                       # the bug: register returns as if it had succeeded
        done.append((ptr + off, size))
    return done


def teardown(store: Any, ranges: list[tuple[int, int]]) -> None:
    """Unregister each base once; keep the ones that failed for the next round."""
    ranges[:] = [(p, s) for p, s in reversed(ranges) if store.unregister_buffer(p) != 0]
