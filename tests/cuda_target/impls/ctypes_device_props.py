"""CORRECT variant (ctypes style) that asks libcudart for the device's properties before it
pins, as code that checks ``canMapHostMemory`` does; kvreg's fake does not model
``cudaGetDeviceProperties``, so kvreg cannot judge the run: an ``error`` naming the API and
where to model it, never a ``fail`` of this code.

``PROBE`` = "raise": the call's failure propagates (the code would fail on a machine whose
libcudart lacks it); "catch": the code treats it as a probe and carries on, which still
takes a path the real machine would not have taken.
"""

from __future__ import annotations

import contextlib
import ctypes

from ctypes_null_handles import _lib, teardown

__all__ = ["register", "register_probe", "teardown"]


def _properties() -> None:
    props = ctypes.create_string_buffer(1024)        # cudaDeviceProp, opaque here
    rc = _lib().cudaGetDeviceProperties(props, 0)
    if rc:
        raise RuntimeError(f"cudaGetDeviceProperties failed with error {rc}")


def _pin(ptr: int, nbytes: int, granularity: int | None,
         chunk_limit: int) -> list[ctypes.c_void_p]:
    from ctypes_null_handles import register as pin

    return pin(ptr, nbytes, granularity=granularity, chunk_limit=chunk_limit)


def register(ptr: int, nbytes: int, *, granularity: int | None,
             chunk_limit: int) -> list[ctypes.c_void_p]:
    _properties()
    return _pin(ptr, nbytes, granularity, chunk_limit)


def register_probe(ptr: int, nbytes: int, *, granularity: int | None,
                   chunk_limit: int) -> list[ctypes.c_void_p]:
    with contextlib.suppress(Exception):     # a probe: no properties, pin anyway
        _properties()
    return _pin(ptr, nbytes, granularity, chunk_limit)
