"""BROKEN (vLLM #51762): a rank whose cudaHostRegister fails rolls back, logs a warning and
goes on unpinned while its peers stay pinned (generic style).

Expected rules: ranks-incoherent (and, on a host that cannot hold every pool,
host-overcommitted); on the failing rank under ``pinning = "required"`` error-swallowed.
"""

from __future__ import annotations

import logging
from typing import Any

from chunked_pins import pin_chunks, teardown, unpin_all

__all__ = ["register", "teardown"]

log = logging.getLogger("kvreg_tests.warn_and_go_on")


def register(cudart: Any, ptr: int, nbytes: int, *, granularity: int | None,
             chunk_limit: int) -> list[tuple[int, int]]:
    done, rc = pin_chunks(cudart, ptr, nbytes, granularity, chunk_limit)
    if rc:
        unpin_all(cudart, done)
        log.warning("cudaHostRegister failed (%d): running on pageable memory", rc)
        return []
    return done
