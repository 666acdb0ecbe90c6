"""BROKEN for pinning = "optional": falls back to pageable memory cleanly, but registers
through torch.cuda.cudart(), whose binding has no cudaGetLastError, so the failed call's
error stays pending in torch's runtime (spec/cuda-runtime.md §6, vllm PR #51081).
Expected rule: error-pending.
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
        if int(cudart.cudaHostRegister(ptr + off, size, 0)):
            for p, _ in reversed(done):
                cudart.cudaHostUnregister(p)
            return []                                # pageable fallback, error left pending
        done.append((ptr + off, size))
    return done


def teardown(cudart: Any, ranges: list[tuple[int, int]]) -> None:
    ranges[:] = [(p, s) for p, s in reversed(ranges) if int(cudart.cudaHostUnregister(p))]
