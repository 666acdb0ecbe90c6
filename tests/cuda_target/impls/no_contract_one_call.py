"""CORRECT below the per-call ceiling (generic style), with no chunk-limit contract: one
cudaHostRegister over the whole buffer, as projects with no chunk limit of their own pin a pool.

``chunk_limit=None`` says the code promises no chunk limit (README, "Implementation styles"):
kvreg passes None and judges its calls against the device profile only. On a pool of 512 GiB
or more the one call fails with 2 (cudaErrorMemoryAllocation) on R580+ drivers
(docs/cuda-runtime.md §2.2) and register raises, naming it: a real failure, which kvreg still
reports (unexpected-error). whole_then_chunks.py is the variant that falls back to chunks.
"""

from __future__ import annotations

from typing import Any


def register(cudart: Any, ptr: int, nbytes: int, *, granularity: int | None,
             chunk_limit: int | None = None) -> list[tuple[int, int]]:
    if nbytes == 0:
        return []
    rc = int(cudart.cudaHostRegister(ptr, nbytes, 0))
    if rc:
        text = str(cudart.cudaGetErrorString(cudart.cudaError(rc)))
        raise RuntimeError(f"cudaHostRegister({ptr:#x}, {nbytes}) failed: {text} (rc={rc})")
    return [(ptr, nbytes)]


def teardown(cudart: Any, ranges: list[tuple[int, int]]) -> None:
    """Release each base once; keep what failed for a later retry."""
    ranges[:] = [(p, s) for p, s in ranges if int(cudart.cudaHostUnregister(p))]
