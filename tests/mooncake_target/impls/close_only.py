"""A correct variant whose teardown is closing the store (run with ``--teardown close``):
Mooncake's close() runs tearDownAll, which unregisters every buffer (mooncake-verbs.md §1.1).
Registration as the reference: MRs on the object stride, reverse rollback."""

from __future__ import annotations

from typing import Any


def register(store: Any, ptr: int, nbytes: int, *, max_mr_size: int,
             granularity: int | None) -> list[tuple[int, int]]:
    unit = granularity or 1
    if unit > max_mr_size:
        raise ValueError(f"object stride {unit} is above the MR limit {max_mr_size}")
    step = max_mr_size // unit * unit
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
