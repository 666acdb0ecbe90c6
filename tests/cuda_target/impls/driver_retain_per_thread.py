"""CORRECT variant (driver style): retains the device's primary context once per thread and
pushes it, keeping it for the thread's life (the way a transfer engine binds its worker
threads, kvcache-ai/Mooncake PR #2034; docs/cuda-runtime.md §13), then registers in chunks
with a rollback."""

from __future__ import annotations

import threading
from typing import Any

_BOUND = threading.local()


def _driver() -> Any:
    from cuda.bindings import driver

    (err,) = driver.cuInit(0)
    if int(err):
        raise RuntimeError(f"cuInit failed (CUresult {int(err)})")
    if not getattr(_BOUND, "done", False):
        err, ctx = driver.cuDevicePrimaryCtxRetain(0)
        if int(err) or int(driver.cuCtxPushCurrent(ctx)[0]):
            raise RuntimeError("could not make the primary context current on this thread")
        _BOUND.done = True
    return driver


def register(ptr: int, nbytes: int, *, granularity: int | None,
             chunk_limit: int) -> list[tuple[int, int]]:
    drv = _driver()
    unit = granularity or 4096
    step = chunk_limit // unit * unit
    done: list[tuple[int, int]] = []
    for off in range(0, nbytes, step):
        size = min(step, nbytes - off)
        (err,) = drv.cuMemHostRegister(ptr + off, size, 0)
        if int(err):
            for base, _ in reversed(done):
                drv.cuMemHostUnregister(base)
            raise RuntimeError(f"cuMemHostRegister failed: CUresult {int(err)}")
        done.append((ptr + off, size))
    return done


def teardown(ranges: list[tuple[int, int]]) -> None:
    drv = _driver()
    ranges[:] = [(b, s) for b, s in reversed(ranges) if int(drv.cuMemHostUnregister(b)[0])]
