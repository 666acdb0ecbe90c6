"""BROKEN (generic style): the chunk is rounded UP to a whole number of pages, so with a
granularity every chunk is slightly above the configured limit.

Seams stay on page boundaries, so transfers still work: only the limit rule catches it.
Expected rule: chunk-over-limit.
"""

from __future__ import annotations

from typing import Any


def register(cudart: Any, ptr: int, nbytes: int, *, granularity: int | None,
             chunk_limit: int) -> list[tuple[int, int]]:
    if granularity is not None and granularity > chunk_limit:
        raise ValueError(f"granularity {granularity} exceeds the chunk limit {chunk_limit}")
    g = granularity or 1
    chunk = -(-chunk_limit // g) * g             # the bug: rounded up (ceil), not down
    done: list[tuple[int, int]] = []
    for off in range(0, nbytes, chunk):
        size = min(chunk, nbytes - off)
        rc = int(cudart.cudaHostRegister(ptr + off, size, 0))
        if rc:
            for p, _ in reversed(done):
                cudart.cudaHostUnregister(p)
            raise RuntimeError(f"cudaHostRegister failed (rc={rc}) at offset={off}")
        done.append((ptr + off, size))
    return done


def teardown(cudart: Any, ranges: list[tuple[int, int]]) -> None:
    for p, _ in reversed(ranges):
        cudart.cudaHostUnregister(p)
    ranges.clear()
