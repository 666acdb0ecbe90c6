"""BROKEN (generic style): declares a chunk-limit contract (``chunk_limit`` without a default)
and then registers the whole buffer in one call whatever the limit.

The contract is the implementation's own (README, "Implementation styles"), so kvreg judges
it: every call above the limit breaks it. Expected rule: chunk-over-limit (and not-rejected
where a granularity above the limit must be refused).
"""

from __future__ import annotations

from typing import Any


def register(cudart: Any, ptr: int, nbytes: int, *, granularity: int | None,
             chunk_limit: int) -> list[tuple[int, int]]:
    if nbytes == 0:
        return []
    rc = int(cudart.cudaHostRegister(ptr, nbytes, 0))    # the bug: chunk_limit never used
    if rc:
        text = str(cudart.cudaGetErrorString(cudart.cudaError(rc)))
        raise RuntimeError(f"cudaHostRegister({ptr:#x}, {nbytes}) failed: {text} (rc={rc})")
    return [(ptr, nbytes)]


def teardown(cudart: Any, ranges: list[tuple[int, int]]) -> None:
    ranges[:] = [(p, s) for p, s in ranges if int(cudart.cudaHostUnregister(p))]
