"""BROKEN (generic style): teardown unregisters a pointer inside each chunk (its last page)
instead of the chunk's base, which cudaHostUnregister refuses; nothing is released.

Expected rules: unregister-not-a-live-base ("inside a registration, not its base"), leak.
"""

from __future__ import annotations

from typing import Any


def register(cudart: Any, ptr: int, nbytes: int, *, granularity: int | None,
             chunk_limit: int) -> list[tuple[int, int]]:
    if granularity is not None and granularity > chunk_limit:
        raise ValueError(f"granularity {granularity} exceeds the chunk limit {chunk_limit}")
    chunk = nbytes if granularity is None else (chunk_limit // granularity) * granularity
    done: list[tuple[int, int]] = []
    for off in range(0, nbytes, max(chunk, 1)):
        size = min(chunk, nbytes - off)
        rc = int(cudart.cudaHostRegister(ptr + off, size, 0))
        if rc:
            for p, _ in reversed(done):
                cudart.cudaHostUnregister(p)
            raise RuntimeError(f"cudaHostRegister failed (rc={rc}) at offset={off}")
        done.append((ptr + off, size))
    return done


def teardown(cudart: Any, ranges: list[tuple[int, int]]) -> None:
    for ptr, size in reversed(ranges):
        cudart.cudaHostUnregister(ptr + size // 2)   # the bug: an interior pointer
    ranges.clear()
