"""BROKEN (driver style): a chunk is recorded only after ``cuMemHostGetFlags`` confirmed it,
and a failed check rolls back only the recorded chunks: the chunk just registered stays
pinned.

Expected rule: not-rolled-back, on every scenario that fails ``cudriver.cuMemHostGetFlags``.
"""

from __future__ import annotations

from typing import Any


def _driver() -> Any:
    from cuda.bindings import driver as drv

    drv.cuInit(0)
    try:
        err, ctx = drv.cuDevicePrimaryCtxRetain(drv.cuDeviceGet(0)[1])
        if not int(err):
            drv.cuCtxSetCurrent(ctx)
    except NotImplementedError:   # a fake without contexts: the registrations need none
        pass
    return drv


def register(ptr: int, nbytes: int, *, granularity: int | None,
             chunk_limit: int) -> list[tuple[int, int]]:
    drv = _driver()
    unit = granularity or 4096
    step = chunk_limit // unit * unit
    done: list[tuple[int, int]] = []
    for off in range(0, nbytes, step):
        size = min(step, nbytes - off)
        (err,) = drv.cuMemHostRegister(ptr + off, size, 0)
        if not int(err):
            err, _ = drv.cuMemHostGetFlags(ptr + off)
        if int(err):
            for base, _ in reversed(done):      # the bug: the chunk just checked is not here
                drv.cuMemHostUnregister(base)
            raise RuntimeError(f"chunk at offset {off} failed (CUresult {int(err)})")
        done.append((ptr + off, size))
    return done


def teardown(ranges: list[tuple[int, int]]) -> None:
    drv = _driver()
    ranges[:] = [(b, s) for b, s in reversed(ranges) if int(drv.cuMemHostUnregister(b)[0])][::-1]
