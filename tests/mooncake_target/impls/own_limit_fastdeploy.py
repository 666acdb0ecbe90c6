"""A correct variant that computes its own effective MR limit, as FastDeploy's connector
does (mooncake-verbs.md §2.1, §1.6): MC_MAX_MR_SIZE through FastDeploy's clamp (unset or 0
-> 4 GiB, below 1 GiB -> 1 GiB, above 6 GiB -> 6 GiB), then lowered to the max_mr_size every
RDMA device reports through pyverbs. MRs on the object stride, reverse rollback.
``max_mr_size`` defaults to None: this register computes the limit when it is not given."""

from __future__ import annotations

import os
from typing import Any

GiB = 1 << 30


def own_limit() -> int:
    from pyverbs.device import Context, get_device_list

    raw = int(os.environ.get("MC_MAX_MR_SIZE", "0") or 0)
    limit = 4 * GiB if raw <= 0 else min(max(raw, 1 * GiB), 6 * GiB)
    for dev in get_device_list():
        with Context(name=dev.name) as ctx:
            limit = min(limit, int(ctx.query_device().max_mr_size))
    return limit


def register(store: Any, ptr: int, nbytes: int, *, max_mr_size: int | None = None,
             granularity: int | None) -> list[tuple[int, int]]:
    limit = own_limit() if max_mr_size is None else max_mr_size
    unit = granularity or 1
    if unit > limit:
        raise ValueError(f"object stride {unit} is above the MR limit {limit}")
    step = limit // unit * unit
    done: list[tuple[int, int]] = []
    for off in range(0, nbytes, step):
        size = min(step, nbytes - off)
        rc = store.register_buffer(ptr + off, size)
        if rc != 0:
            for p, _ in reversed(done):
                store.unregister_buffer(p)
            raise RuntimeError(f"register_buffer failed (rc={rc}) at offset {off} size {size}")
        done.append((ptr + off, size))
    return done


def teardown(store: Any, ranges: list[tuple[int, int]]) -> None:
    """Unregister each base once; keep the ones that failed for the next round."""
    ranges[:] = [(p, s) for p, s in reversed(ranges) if store.unregister_buffer(p) != 0]
