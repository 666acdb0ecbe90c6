"""CORRECT variant (generic style): upstream's chunk size, but the rollback after a failed
chunk releases the earlier chunks first-to-last instead of last-to-first.

The order of a rollback does not matter for correctness, only that every chunk is released
exactly once. Must not be flagged by any scenario.
"""

from __future__ import annotations

from typing import Any


def register(cudart: Any, ptr: int, nbytes: int, *, granularity: int | None,
             chunk_limit: int) -> list[tuple[int, int]]:
    g = granularity or 1
    if g <= 0 or g > chunk_limit:
        raise ValueError(f"granularity {g} must be positive and at most {chunk_limit}")
    chunk = (chunk_limit // g) * g
    done: list[tuple[int, int]] = []
    for off in range(0, nbytes, chunk):
        size = min(chunk, nbytes - off)
        rc = int(cudart.cudaHostRegister(ptr + off, size, 0))
        if rc:
            kept = [(p, s) for p, s in done if int(cudart.cudaHostUnregister(p))]  # forward
            raise RuntimeError(f"cudaHostRegister failed (rc={rc}) at offset={off} size={size}"
                               + (f"; could not roll back {kept}" if kept else ""))
        done.append((ptr + off, size))
    return done


def teardown(cudart: Any, ranges: list[tuple[int, int]]) -> None:
    ranges[:] = [(p, s) for p, s in ranges if int(cudart.cudaHostUnregister(p))]


# a second teardown retries only what failed: the repeatable-teardown contract, declared
teardown.repeatable = True   # type: ignore[attr-defined]
