"""BROKEN (generic style): an impossible granularity is rejected with TypeError instead of
the ValueError callers catch (SGLang raises ValueError, docs/pools.md §1.1).

Expected rule: rejected-wrong-error.
"""

from __future__ import annotations

from typing import Any


def register(cudart: Any, ptr: int, nbytes: int, *, granularity: int | None,
             chunk_limit: int) -> list[tuple[int, int]]:
    if granularity is not None and granularity > chunk_limit:
        raise TypeError(f"granularity {granularity} exceeds the chunk limit {chunk_limit}")
    chunk = chunk_limit if granularity is None else (chunk_limit // granularity) * granularity
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
