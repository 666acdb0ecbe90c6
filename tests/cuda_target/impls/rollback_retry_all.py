"""BROKEN: when a rollback unregister fails, the rollback stops and starts over from the
last chunk, unregistering again the chunks it had already released.

Harmless when the first rollback unregister fails (nothing was released before it); a
failure on a later one unregisters released bases again (713). Expected rule:
unregister-not-a-live-base ("which was already released").
"""

from __future__ import annotations

from typing import Any


def _rollback(cudart: Any, done: list[tuple[int, int]]) -> list[tuple[int, int]]:
    for _attempt in range(2):
        for p, _ in reversed(done):
            if int(cudart.cudaHostUnregister(p)):
                break       # the bug: start the rollback over, released chunks included
        else:
            return []
    return list(done)


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
            left = _rollback(cudart, done)
            raise RuntimeError(f"cudaHostRegister failed (rc={rc}) at offset={off} size={size}"
                               + (f"; could not roll back {left}" if left else ""))
        done.append((ptr + off, size))
    return done


def teardown(cudart: Any, ranges: list[tuple[int, int]]) -> None:
    failed = [(p, s) for p, s in reversed(ranges) if int(cudart.cudaHostUnregister(p))]
    failed.reverse()
    ranges[:] = failed
