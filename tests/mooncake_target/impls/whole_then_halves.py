"""Broken: the whole buffer first and, on -600, one retry in two halves (on the object
stride); a half above the MR limit is refused too (released Mooncake, docs/mooncake-verbs.md
§1.6) and register raises. It works only for pools below twice the limit."""

from __future__ import annotations

from typing import Any


def register(store: Any, ptr: int, nbytes: int, *, max_mr_size: int,
             granularity: int | None) -> list[tuple[int, int]]:
    rc = store.register_buffer(ptr, nbytes)
    if rc == 0:
        return [(ptr, nbytes)]
    unit = granularity or 1
    half = max(nbytes // 2 // unit * unit, unit)
    done: list[tuple[int, int]] = []
    for off, size in ((0, half), (half, nbytes - half)):
        rc = store.register_buffer(ptr + off, size)
        if rc != 0:
            for p, _ in reversed(done):
                store.unregister_buffer(p)
            raise RuntimeError(f"register_buffer of half the buffer failed (rc={rc})")
        done.append((ptr + off, size))
    return done


def teardown(store: Any, ranges: list[tuple[int, int]]) -> None:
    """Unregister each base once; keep the ones that failed for the next round."""
    ranges[:] = [(p, s) for p, s in reversed(ranges) if store.unregister_buffer(p) != 0]
