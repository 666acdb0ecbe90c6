"""CORRECT (generic style), with no chunk-limit parameter at all: the whole buffer in one
cudaHostRegister, and only when the runtime refuses that with 2 (cudaErrorMemoryAllocation,
the 512 GiB per-call ceiling of R580+ drivers, docs/cuda-runtime.md §2.2), chunks of its own
size rounded down to the granularity, all or nothing.

It declares no chunk-limit contract (README, "Implementation styles"): kvreg passes no
chunk_limit and judges its calls against the device profile only. torch's binding has no
cudaGetLastError, so the refused call's error stays pending there: a warning, said once per
run.
"""

from __future__ import annotations

from typing import Any

OWN_CHUNK = 256 << 30
OUT_OF_MEMORY = 2


def _fail(cudart: Any, rc: int, ptr: int, size: int) -> RuntimeError:
    text = str(cudart.cudaGetErrorString(cudart.cudaError(rc)))
    return RuntimeError(f"cudaHostRegister({ptr:#x}, {size}) failed: {text} (rc={rc})")


def register(cudart: Any, ptr: int, nbytes: int, *,
             granularity: int | None) -> list[tuple[int, int]]:
    if nbytes == 0:
        return []
    rc = int(cudart.cudaHostRegister(ptr, nbytes, 0))
    if rc == 0:
        return [(ptr, nbytes)]
    if rc != OUT_OF_MEMORY:
        raise _fail(cudart, rc, ptr, nbytes)
    unit = granularity or 1
    step = max(OWN_CHUNK // unit, 1) * unit
    done: list[tuple[int, int]] = []
    for off in range(0, nbytes, step):
        size = min(step, nbytes - off)
        rc = int(cudart.cudaHostRegister(ptr + off, size, 0))
        if rc:
            for base, _ in reversed(done):
                cudart.cudaHostUnregister(base)
            raise _fail(cudart, rc, ptr + off, size)
        done.append((ptr + off, size))
    return done


def teardown(cudart: Any, ranges: list[tuple[int, int]]) -> None:
    """Release each base once; keep what failed for a later retry."""
    ranges[:] = [(p, s) for p, s in ranges if int(cudart.cudaHostUnregister(p))]
