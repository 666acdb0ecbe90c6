"""BROKEN: when an unregister_buffer of the rollback fails, the rollback stops and starts
over with every MR, unregistering again the ones it had already released. Harmless when the first
rollback unregister fails; a later one shows it (mooncake-verbs.md §1.5 step 5: an unknown
base returns INVALID_PARAMS). Expected rule: unregister-not-a-live-base."""

from __future__ import annotations

from typing import Any


def _rollback(store: Any, done: list[tuple[int, int]]) -> None:
    for _attempt in range(2):
        for p, _ in reversed(done):
            if store.unregister_buffer(p) != 0:
                break       # the bug: start the rollback over, released MRs included
        else:
            return


def register(store: Any, ptr: int, nbytes: int, *, max_mr_size: int,
             granularity: int | None) -> list[tuple[int, int]]:
    unit = granularity or 1
    step = max_mr_size // unit * unit
    done: list[tuple[int, int]] = []
    for off in range(0, nbytes, step):
        size = min(step, nbytes - off)
        rc = store.register_buffer(ptr + off, size)
        if rc != 0:
            _rollback(store, done)
            raise RuntimeError(f"register_buffer failed (rc={rc}) at offset {off} size {size}")
        done.append((ptr + off, size))
    return done


def teardown(store: Any, ranges: list[tuple[int, int]]) -> None:
    ranges[:] = [(p, s) for p, s in reversed(ranges) if store.unregister_buffer(p) != 0]
