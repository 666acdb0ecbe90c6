"""What the generic-style rank implementations here share: pinning a pool chunk by chunk
(the granularity rounds the chunk down, never below one granule) and a repeatable teardown
that keeps what failed to unregister. Each implementation adds only how its ranks agree.
Imported by its siblings (kvreg puts an implementation's folder first on ``sys.path``)."""

from __future__ import annotations

from typing import Any


def pin_chunks(cudart: Any, ptr: int, nbytes: int, granularity: int | None,
               chunk_limit: int) -> tuple[list[tuple[int, int]], int]:
    """Pin ``[ptr, ptr + nbytes)`` in chunks: (the chunks pinned, 0 or the failed call's
    code; the chunks before a failure stay pinned for the caller to undo)."""
    g = granularity or 1
    chunk = max((chunk_limit // g) * g, g)
    done: list[tuple[int, int]] = []
    for off in range(0, nbytes, chunk):
        size = min(chunk, nbytes - off)
        rc = int(cudart.cudaHostRegister(ptr + off, size, 0))
        if rc:
            return done, rc
        done.append((ptr + off, size))
    return done, 0


def unpin_all(cudart: Any, done: list[tuple[int, int]]) -> None:
    """Roll back: unregister the chunks, last first."""
    for p, _ in reversed(done):
        cudart.cudaHostUnregister(p)


def teardown(cudart: Any, ranges: list[tuple[int, int]]) -> None:
    ranges[:] = [(p, s) for p, s in reversed(ranges) if int(cudart.cudaHostUnregister(p))]


teardown.repeatable = True  # type: ignore[attr-defined]
