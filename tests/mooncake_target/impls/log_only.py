"""Errors only logged (FastDeploy's pre-chunking ``register_buffer``, docs/mooncake-verbs.md §2.1:
"logs on nonzero (no raise)"): chunks are stride-aligned, but a failed ``register_buffer`` is
logged and skipped, so the pool runs with a hole no NIC can reach."""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("fastdeploy.mooncake_store")


def _chunks(nbytes: int, max_mr_size: int, granularity: int | None) -> list[tuple[int, int]]:
    """(offset, size) of MRs at most ``max_mr_size``, seams on multiples of the stride."""
    unit = granularity or 1
    if unit > max_mr_size:
        raise ValueError(f"object stride {unit} is above the MR limit {max_mr_size}")
    step = max_mr_size // unit * unit
    return [(off, min(step, nbytes - off)) for off in range(0, nbytes, step)]


def register(store: Any, ptr: int, nbytes: int, *, max_mr_size: int,
             granularity: int | None) -> list[tuple[int, int]]:
    ranges = []
    for off, size in _chunks(nbytes, max_mr_size, granularity):
        ret = store.register_buffer(ptr + off, size)
        if ret != 0:
            log.error("Mooncake Store Register Buffer Error: ret=%d", ret)
            continue
        ranges.append((ptr + off, size))
    return ranges


def teardown(store: Any, ranges: list[tuple[int, int]]) -> None:
    """Unregister each base once; keep the ones that failed for the next round."""
    ranges[:] = [(p, s) for p, s in ranges if store.unregister_buffer(p) != 0]
