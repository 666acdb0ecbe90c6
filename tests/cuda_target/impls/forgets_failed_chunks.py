"""BROKEN (generic style): teardown drops every chunk from its list even when
cudaHostUnregister failed, so the second teardown cannot retry and the chunk stays pinned.

Expected rule: leak ("teardown lost track of it after cudaHostUnregister failed").
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
        cudart.cudaHostUnregister(p)             # the bug: the return code is ignored ...
    ranges.clear()                               # ... and every chunk forgotten


# it promises a repeatable teardown (a later round retries what failed) and breaks it
teardown.repeatable = True   # type: ignore[attr-defined]
