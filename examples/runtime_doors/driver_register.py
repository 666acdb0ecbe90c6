"""Chunked, all-or-nothing host registration through the CUDA driver API (cuda-python).

``cuMemHostRegister`` leaves the runtime's last-error state alone, so a failed registration
cannot surface later as a bogus error in an unrelated torch operation. Registrations are
driver-level: torch and cuda-python see them too. Run it over kvreg's scenario catalog with
the ``driver`` style (kvreg's fake answers the door this code uses):

    kvreg run --impl examples/runtime_doors/driver_register.py:register --style driver

``generic_register`` / ``generic_teardown`` offer the same code to the ``generic`` style.

Driver memory calls need a CUDA context current on the calling thread. ``cuInit`` makes none
current, and the thread that registers may never have called the runtime (a worker thread):
there ``cuMemHostRegister`` gives CUDA_ERROR_INVALID_CONTEXT. So each call makes the device's
primary context current for its duration when the thread has none, and puts things back
after (kvcache-ai/Mooncake PR #2034; docs/cuda-runtime.md §13).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

PAGE = 4096
DEVICE = 0   # the GPU the pool serves


class CudaRegistrationError(RuntimeError):
    """A cuMemHostRegister / cuMemHostUnregister failure, with the driver's name for it."""


def _driver() -> Any:
    from cuda.bindings import driver

    (err,) = driver.cuInit(0)
    if int(err) != 0:
        raise CudaRegistrationError(f"cuInit failed: {_name(driver, err)}")
    return driver


@contextmanager
def _primary_context(driver: Any) -> Iterator[None]:
    """The device's primary context current on this thread for the block, if none is."""
    err, current = driver.cuCtxGetCurrent()
    if int(err) != 0:
        raise CudaRegistrationError(f"cuCtxGetCurrent failed: {_name(driver, err)}")
    if int(current) != 0:    # the thread already has one (the runtime made it current)
        yield
        return
    err, ctx = driver.cuDevicePrimaryCtxRetain(DEVICE)
    if int(err) != 0:
        raise CudaRegistrationError(f"cuDevicePrimaryCtxRetain failed: {_name(driver, err)}")
    try:
        (err,) = driver.cuCtxSetCurrent(ctx)
        if int(err) != 0:
            raise CudaRegistrationError(f"cuCtxSetCurrent failed: {_name(driver, err)}")
        try:
            yield
        finally:
            driver.cuCtxSetCurrent(None)
    finally:
        driver.cuDevicePrimaryCtxRelease(DEVICE)


def _name(driver: Any, err: Any) -> str:
    res, name = driver.cuGetErrorName(err)
    return name.decode() if int(res) == 0 and name else f"CUresult {int(err)}"


def plan(nbytes: int, granularity: int | None, chunk_limit: int) -> list[tuple[int, int]]:
    """(offset, size) chunks: every seam a multiple of the copy unit, none above the limit."""
    unit = granularity or PAGE
    if unit <= 0:
        raise ValueError(f"granularity must be positive, got {unit}")
    step = chunk_limit - chunk_limit % unit
    if step <= 0:
        raise ValueError(f"granularity {unit} does not fit in the chunk limit {chunk_limit}")
    return [(off, min(step, nbytes - off)) for off in range(0, nbytes, step)]


def register(ptr: int, nbytes: int, *, granularity: int | None,
             chunk_limit: int) -> list[tuple[int, int]]:
    """Pin ``[ptr, ptr+nbytes)`` in chunks; on any failure undo what was pinned and raise."""
    chunks = plan(nbytes, granularity, chunk_limit)
    driver = _driver()
    done: list[tuple[int, int]] = []
    with _primary_context(driver):
        for off, size in chunks:
            (err,) = driver.cuMemHostRegister(ptr + off, size, 0)
            if int(err) != 0:
                failures = _release(driver, done)
                raise CudaRegistrationError(
                    f"cuMemHostRegister({ptr + off:#x}, {size}) failed: {_name(driver, err)} "
                    f"(rc={int(err)}); rolled back {len(done)} chunk(s)"
                    + (f", {len(failures)} of them failed to unregister" if failures else ""))
            done.append((ptr + off, size))
    return done


def _release(driver: Any, ranges: list[tuple[int, int]]) -> list[tuple[int, Any]]:
    failures = []
    for base, _size in reversed(ranges):
        (err,) = driver.cuMemHostUnregister(base)
        if int(err) != 0:
            failures.append((base, err))
    return failures


def teardown(ranges: list[tuple[int, int]]) -> None:
    """Unregister every chunk (all of them, even after a failure), newest first.

    ``ranges`` keeps only what could not be released, so a second teardown (pool destroy
    after an explicit close) makes no calls instead of unregistering twice.
    """
    if not ranges:
        return
    driver = _driver()
    with _primary_context(driver):
        failures = _release(driver, ranges)
    left = {base for base, _ in failures}
    ranges[:] = [r for r in ranges if r[0] in left]
    if failures:
        shown = ", ".join(f"{b:#x}: {_name(driver, e)}" for b, e in failures)
        raise CudaRegistrationError(f"cuMemHostUnregister failed for {shown}")



# kvreg: a second teardown retries only what failed (README, "Implementation styles"); without
# this attribute kvreg tears down once, as a caller that never calls teardown twice does
teardown.repeatable = True  # type: ignore[attr-defined]

# -- the generic style of kvreg's runner passes torch's cudart first; this code ignores it ---
def generic_register(cudart: Any, ptr: int, nbytes: int, *, granularity: int | None,
                     chunk_limit: int) -> list[tuple[int, int]]:
    return register(ptr, nbytes, granularity=granularity, chunk_limit=chunk_limit)


def generic_teardown(cudart: Any, ranges: list[tuple[int, int]]) -> None:
    teardown(ranges)


generic_teardown.repeatable = True  # type: ignore[attr-defined]
