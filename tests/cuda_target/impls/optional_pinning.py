"""CORRECT variant for pinning = "optional" (generic style, vLLM CPU-offload approach):
pin if possible, otherwise roll back, drain the error and run on pageable memory (and
raise when the rollback itself fails, since no clean fallback is left).

Registers and drains through ``cuda.bindings.runtime``, one runtime that has
cudaGetLastError (vllm PR #50070; spec/cuda-runtime.md §6), so a fallback leaves nothing
registered, nothing pending and raises nothing.
"""

from __future__ import annotations

from typing import Any


def _rt() -> Any:
    """cuda.bindings.runtime as it is now (imported at call time, so a patched one counts)."""
    from cuda.bindings import runtime

    return runtime


def _code(res: Any) -> int:
    return int(res[0] if isinstance(res, tuple) else res)


def _release(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    rt = _rt()
    failed = [(p, s) for p, s in reversed(ranges) if _code(rt.cudaHostUnregister(p))]
    failed.reverse()
    return failed


def register(cudart: Any, ptr: int, nbytes: int, *, granularity: int | None,
             chunk_limit: int) -> list[tuple[int, int]]:
    g = granularity or 1
    if g <= 0 or g > chunk_limit:
        raise ValueError(f"granularity {g} must be positive and at most {chunk_limit}")
    chunk = (chunk_limit // g) * g
    rt = _rt()
    done: list[tuple[int, int]] = []
    for off in range(0, nbytes, chunk):
        size = min(chunk, nbytes - off)
        rc = _code(rt.cudaHostRegister(ptr + off, size, 0))
        if rc:
            rt.cudaGetLastError()                    # drain: nothing stays pending
            left = _release(done)
            rt.cudaGetLastError()
            if left:                                 # no clean fallback: say what failed
                raise RuntimeError(f"cudaHostRegister failed (rc={rc}) at offset={off}; "
                                   f"rollback could not release {left}")
            return []                                # pageable fallback
        done.append((ptr + off, size))
    return done


def teardown(cudart: Any, ranges: list[tuple[int, int]]) -> None:
    ranges[:] = _release(ranges)
    _rt().cudaGetLastError()
