"""Generic style with a declared chunk limit (``chunk_limit`` without a default): one
``cudaHostRegister`` over the whole buffer first, as code written for drivers without a
per-call ceiling does; when the runtime refuses it with 2 (the 512 GiB per-call ceiling of
R580+ drivers, docs/cuda-runtime.md §2.2), chunks of ``chunk_limit`` rounded down to the
granularity.

- ``register``: all or nothing, a failed chunk rolled back and raised with its error string.
  CORRECT where the whole call is refused: a refused call registered nothing, and only what
  was registered is held to the declared limit (issue 24 §4, judge results). Where the whole
  call succeeds above the limit (a pool below the ceiling), the code broke its own promise:
  chunk-over-limit.
- ``register_swallows``: BROKEN, logs a failed chunk and returns what it has. Expected rule:
  error-swallowed, naming that chunk, not the whole call it recovered from.
"""

from __future__ import annotations

import logging
from typing import Any

OUT_OF_MEMORY = 2
log = logging.getLogger(__name__)


def _text(cudart: Any, rc: int) -> str:
    return str(cudart.cudaGetErrorString(cudart.cudaError(rc)))


def _pin(cudart: Any, ptr: int, nbytes: int, granularity: int | None, chunk_limit: int,
         swallow: bool) -> list[tuple[int, int]]:
    if nbytes == 0:
        return []
    rc = int(cudart.cudaHostRegister(ptr, nbytes, 0))
    if rc == 0:
        return [(ptr, nbytes)]
    if rc != OUT_OF_MEMORY:
        raise RuntimeError(f"cudaHostRegister({ptr:#x}, {nbytes}): {_text(cudart, rc)}")
    unit = granularity or 1
    step = max(chunk_limit // unit, 1) * unit
    done: list[tuple[int, int]] = []
    for off in range(0, nbytes, step):
        size = min(step, nbytes - off)
        rc = int(cudart.cudaHostRegister(ptr + off, size, 0))
        if rc == 0:
            done.append((ptr + off, size))
            continue
        if swallow:
            log.warning("cudaHostRegister of a chunk failed (%d); running partly pageable", rc)
            return done
        done[:] = [(b, s) for b, s in reversed(done) if int(cudart.cudaHostUnregister(b))]
        raise RuntimeError(f"cudaHostRegister({ptr + off:#x}, {size}): {_text(cudart, rc)}")
    return done


def register(cudart: Any, ptr: int, nbytes: int, *, granularity: int | None,
             chunk_limit: int) -> list[tuple[int, int]]:
    return _pin(cudart, ptr, nbytes, granularity, chunk_limit, swallow=False)


def register_swallows(cudart: Any, ptr: int, nbytes: int, *, granularity: int | None,
                      chunk_limit: int) -> list[tuple[int, int]]:
    return _pin(cudart, ptr, nbytes, granularity, chunk_limit, swallow=True)


def teardown(cudart: Any, ranges: list[tuple[int, int]]) -> None:
    """Release each base once; keep what failed for a later retry."""
    ranges[:] = [(p, s) for p, s in ranges if int(cudart.cudaHostUnregister(p))]
