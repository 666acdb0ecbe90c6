"""Chunked, all-or-nothing host registration through the CUDA driver API (cuda-python).

``cuMemHostRegister`` leaves the runtime's last-error state alone, so a failed registration
cannot surface later as a bogus error in an unrelated torch operation. Registrations are
driver-level: torch and cuda-python see them too. Run it over kvreg's scenario catalog with
the ``driver`` style (kvreg's fake answers the door this code uses):

    kvreg run --impl examples/runtime_doors/driver_register.py:register --style driver

``generic_register`` / ``generic_teardown`` offer the same code to the ``generic`` style.
"""

from __future__ import annotations

from typing import Any

PAGE = 4096


class CudaRegistrationError(RuntimeError):
    """A cuMemHostRegister / cuMemHostUnregister failure, with the driver's name for it."""


def _driver() -> Any:
    from cuda.bindings import driver

    (err,) = driver.cuInit(0)
    if int(err) != 0:
        raise CudaRegistrationError(f"cuInit failed: {_name(driver, err)}")
    return driver


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
    failures = _release(driver, ranges)
    left = {base for base, _ in failures}
    ranges[:] = [r for r in ranges if r[0] in left]
    if failures:
        shown = ", ".join(f"{b:#x}: {_name(driver, e)}" for b, e in failures)
        raise CudaRegistrationError(f"cuMemHostUnregister failed for {shown}")


# -- the generic style of kvreg's runner passes torch's cudart first; this code ignores it ---
def generic_register(cudart: Any, ptr: int, nbytes: int, *, granularity: int | None,
                     chunk_limit: int) -> list[tuple[int, int]]:
    return register(ptr, nbytes, granularity=granularity, chunk_limit=chunk_limit)


def generic_teardown(cudart: Any, ranges: list[tuple[int, int]]) -> None:
    teardown(ranges)
