"""CORRECT variant (generic style): chunks of half the limit, still a whole number of pages.

A different but valid chunk size: every call is below the limit and every seam falls on a
multiple of the granularity; reverse-order rollback; idempotent teardown that keeps what it
could not release. Must not be flagged by any scenario.
"""

from __future__ import annotations

from typing import Any


def _unregister(cudart: Any, ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    failed = [(p, s) for p, s in reversed(ranges) if int(cudart.cudaHostUnregister(p))]
    failed.reverse()
    return failed


def register(cudart: Any, ptr: int, nbytes: int, *, granularity: int | None,
             chunk_limit: int) -> list[tuple[int, int]]:
    g = granularity or 1
    if g <= 0 or g > chunk_limit:
        raise ValueError(f"granularity {g} must be positive and at most {chunk_limit}")
    chunk = max((chunk_limit // 2) // g, 1) * g
    done: list[tuple[int, int]] = []
    for off in range(0, nbytes, chunk):
        size = min(chunk, nbytes - off)
        rc = int(cudart.cudaHostRegister(ptr + off, size, 0))
        if rc:
            left = _unregister(cudart, done)
            raise RuntimeError(f"cudaHostRegister failed (rc={rc}) at offset={off} size={size}"
                               + (f"; could not roll back {left}" if left else ""))
        done.append((ptr + off, size))
    return done


def teardown(cudart: Any, ranges: list[tuple[int, int]]) -> None:
    ranges[:] = _unregister(cudart, ranges)


# a second teardown retries only what failed: the repeatable-teardown contract, declared
teardown.repeatable = True   # type: ignore[attr-defined]
