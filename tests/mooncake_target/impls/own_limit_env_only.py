"""BROKEN: computes its own MR limit from MC_MAX_MR_SIZE (with FastDeploy's clamp) but never
asks the NICs, so a device whose max_mr_size is lower (AMD ionic: 2 GiB; erdma) gets MRs it
refuses (Mooncake #2017, mooncake-verbs.md §1.6). Expected rule: mr-over-limit."""

from __future__ import annotations

import os
from typing import Any

GiB = 1 << 30


def register(store: Any, ptr: int, nbytes: int, *, max_mr_size: int | None = None,
             granularity: int | None) -> list[tuple[int, int]]:
    raw = int(os.environ.get("MC_MAX_MR_SIZE", "0") or 0)
    limit = 4 * GiB if raw <= 0 else min(max(raw, 1 * GiB), 6 * GiB)   # the bug: no NIC
    unit = granularity or 1
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
    ranges[:] = [(p, s) for p, s in reversed(ranges) if store.unregister_buffer(p) != 0]
