"""CORRECT variant (driver style): each chunk is checked with ``cuMemHostGetFlags`` before it
is recorded; a chunk whose check fails is unregistered at once and the chunks before it are
rolled back (cuda.h: cuMemHostGetFlags returns CUDA_SUCCESS, DEINITIALIZED, NOT_INITIALIZED,
INVALID_CONTEXT, INVALID_VALUE).

``cuMemHostGetFlags`` on registered (not ``cuMemHostAlloc``) memory is [UNC]
(docs/cuda-runtime.md §4): the scenarios that target it set ``host_get_flags_on_registered =
"flags"``.
"""

from __future__ import annotations

from typing import Any


def driver() -> Any:
    """cuda.bindings.driver, initialised, with the primary context current on this thread."""
    from cuda.bindings import driver as drv

    (err,) = drv.cuInit(0)
    if int(err):
        raise RuntimeError(f"cuInit failed (CUresult {int(err)})")
    err, dev = drv.cuDeviceGet(0)
    try:
        err, ctx = drv.cuDevicePrimaryCtxRetain(dev)
        if not int(err):
            drv.cuCtxSetCurrent(ctx)
    except NotImplementedError:   # a fake without contexts: the registrations need none
        pass
    return drv


def release(drv: Any, ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Unregister in reverse order; what could not be released."""
    return [(b, s) for b, s in reversed(ranges) if int(drv.cuMemHostUnregister(b)[0])][::-1]


def register(ptr: int, nbytes: int, *, granularity: int | None,
             chunk_limit: int) -> list[tuple[int, int]]:
    drv = driver()
    unit = granularity or 4096
    step = chunk_limit // unit * unit
    done: list[tuple[int, int]] = []
    for off in range(0, nbytes, step):
        size = min(step, nbytes - off)
        (err,) = drv.cuMemHostRegister(ptr + off, size, 0)
        what = "cuMemHostRegister"
        if not int(err):
            err, _flags = drv.cuMemHostGetFlags(ptr + off)
            what = "cuMemHostGetFlags"
        if not int(err):
            done.append((ptr + off, size))
            continue
        chunk = [(ptr + off, size)] if what == "cuMemHostGetFlags" else []
        left = release(drv, done + chunk)
        _, name = drv.cuGetErrorName(err)
        raise RuntimeError(f"{what} failed at offset {off}: "
                           f"{name.decode() if name else int(err)} (rc={int(err)})"
                           + (f"; {len(left)} chunk(s) not released" if left else ""))
    return done


def teardown(ranges: list[tuple[int, int]]) -> None:
    ranges[:] = release(driver(), ranges)
