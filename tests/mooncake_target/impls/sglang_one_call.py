"""SGLang's Mooncake backend (docs/mooncake-verbs.md §3.2): the whole buffer in one
``register_buffer`` call, no chunking, ``RuntimeError`` on a non-zero return. Released
Mooncake rejects a buffer above the MR limit with -600; HEAD splits it itself."""

from __future__ import annotations

from typing import Any


def register(store: Any, ptr: int, nbytes: int, *, max_mr_size: int,
             granularity: int | None) -> list[tuple[int, int]]:
    if nbytes == 0:
        return []
    ret = store.register_buffer(ptr, nbytes)
    if ret != 0:
        raise RuntimeError(f"Mooncake memory registration failed with ret={ret}")
    return [(ptr, nbytes)]


def teardown(store: Any, ranges: list[tuple[int, int]]) -> None:
    for ptr, _ in ranges:
        store.unregister_buffer(ptr)
    ranges.clear()
