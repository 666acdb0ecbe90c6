"""A Mooncake-style implementation (``register(store, ptr, nbytes, *, max_mr_size,
granularity)``) that registers two MRs and then ends the process with ``os._exit(0)``."""

from __future__ import annotations

import os
from typing import Any


def register(store: Any, ptr: int, nbytes: int, *, max_mr_size: int,
             granularity: int | None) -> list[tuple[int, int]]:
    g = granularity or 1
    chunk = max(max_mr_size // g, 1) * g
    for off in range(0, min(nbytes, 2 * chunk), chunk):
        store.register_buffer(ptr + off, min(chunk, nbytes - off))
    os._exit(0)


def teardown(store: Any, ranges: list[tuple[int, int]]) -> None:
    for p, _ in reversed(ranges):
        store.unregister_buffer(p)
