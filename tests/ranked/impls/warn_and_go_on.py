"""BROKEN (vLLM #51762): a rank whose cudaHostRegister fails rolls back, logs a warning and
goes on unpinned while its peers stay pinned (generic style).

Expected rules: ranks-incoherent (and, on a host that cannot hold every pool,
host-overcommitted); on the failing rank under ``pinning = "required"`` error-swallowed.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("kvreg_tests.warn_and_go_on")


def register(cudart: Any, ptr: int, nbytes: int, *, granularity: int | None,
             chunk_limit: int) -> list[tuple[int, int]]:
    g = granularity or 1
    chunk = max((chunk_limit // g) * g, g)
    done: list[tuple[int, int]] = []
    for off in range(0, nbytes, chunk):
        size = min(chunk, nbytes - off)
        rc = int(cudart.cudaHostRegister(ptr + off, size, 0))
        if rc:
            for p, _ in reversed(done):
                cudart.cudaHostUnregister(p)
            log.warning("cudaHostRegister failed (%d): running on pageable memory", rc)
            return []
        done.append((ptr + off, size))
    return done


def teardown(cudart: Any, ranges: list[tuple[int, int]]) -> None:
    ranges[:] = [(p, s) for p, s in reversed(ranges) if int(cudart.cudaHostUnregister(p))]


teardown.repeatable = True  # type: ignore[attr-defined]
