"""Chunked, all-or-nothing host registration through libcudart loaded with ctypes.

This is the approach current vLLM takes: registration and error draining go through the
same libcudart handle, so a failed call's pending error is cleared in the runtime instance
that recorded it (a different runtime, such as torch's bundled one, would never see it).
Run it over kvreg's scenario catalog with the ``ctypes`` style (kvreg's fake answers
the door this code uses):

    kvreg run --impl examples/runtime_doors/ctypes_register.py:register --style ctypes

``generic_register`` / ``generic_teardown`` offer the same code to the ``generic`` style.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Any

PAGE = 4096


class CudaRegistrationError(RuntimeError):
    """A cudaHostRegister / cudaHostUnregister failure, with the runtime's own name for it."""


class PointerAttributes(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("device", ctypes.c_int),
                ("devicePointer", ctypes.c_void_p), ("hostPointer", ctypes.c_void_p),
                ("reserved", ctypes.c_long * 8)]


def load_cudart() -> ctypes.CDLL:
    """libcudart with the C signatures declared (without them ctypes truncates pointers)."""
    lib = ctypes.CDLL(ctypes.util.find_library("cudart") or "libcudart.so")
    lib.cudaHostRegister.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
    lib.cudaHostRegister.restype = ctypes.c_int
    lib.cudaHostUnregister.argtypes = [ctypes.c_void_p]
    lib.cudaHostUnregister.restype = ctypes.c_int
    lib.cudaGetLastError.argtypes = []
    lib.cudaGetLastError.restype = ctypes.c_int
    lib.cudaGetErrorName.argtypes = [ctypes.c_int]
    lib.cudaGetErrorName.restype = ctypes.c_char_p
    return lib


def _name(lib: ctypes.CDLL, code: int) -> str:
    raw = lib.cudaGetErrorName(code)
    return raw.decode() if raw else f"error {code}"


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
    lib = load_cudart()
    done: list[tuple[int, int]] = []
    for off, size in chunks:
        code = lib.cudaHostRegister(ptr + off, size, 0)
        if code != 0:
            lib.cudaGetLastError()          # drain on the handle that recorded it
            failures = _release(lib, done)
            raise CudaRegistrationError(
                f"cudaHostRegister({ptr + off:#x}, {size}) failed: {_name(lib, code)} "
                f"(rc={code}); rolled back {len(done)} chunk(s)"
                + (f", {len(failures)} of them failed to unregister" if failures else ""))
        done.append((ptr + off, size))
    return done


def _release(lib: ctypes.CDLL, ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    failures = []
    for base, _size in reversed(ranges):
        code = lib.cudaHostUnregister(base)
        if code != 0:
            lib.cudaGetLastError()
            failures.append((base, code))
    return failures


def teardown(ranges: list[tuple[int, int]]) -> None:
    """Unregister every chunk (all of them, even after a failure), newest first.

    ``ranges`` keeps only what could not be released, so a second teardown (pool destroy
    after an explicit close) makes no calls instead of unregistering twice.
    """
    if not ranges:
        return
    lib = load_cudart()
    failures = _release(lib, ranges)
    left = {base for base, _ in failures}
    ranges[:] = [r for r in ranges if r[0] in left]
    if failures:
        shown = ", ".join(f"{b:#x}: {_name(lib, c)}" for b, c in failures)
        raise CudaRegistrationError(f"cudaHostUnregister failed for {shown}")



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
