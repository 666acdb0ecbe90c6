"""BROKEN (generic style): the last chunk is registered with the full chunk size instead of
what is left, so it reaches past the end of the buffer.

Expected rule: range-outside-buffer.
"""

from __future__ import annotations

from typing import Any


def register(cudart: Any, ptr: int, nbytes: int, *, granularity: int | None,
             chunk_limit: int) -> list[tuple[int, int]]:
    if granularity is not None and granularity > chunk_limit:
        raise ValueError(f"granularity {granularity} exceeds the chunk limit {chunk_limit}")
    chunk = chunk_limit if granularity is None else (chunk_limit // granularity) * granularity
    done: list[tuple[int, int]] = []
    for off in range(0, nbytes, chunk):
        size = chunk                             # the bug: not min(chunk, nbytes - off)
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
