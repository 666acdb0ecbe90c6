"""CORRECT variant (ctypes style): every chunk is verified before it is recorded.

After each ``cudaHostRegister`` the chunk is checked with ``cudaHostGetDevicePointer`` (the
device alias must be the host pointer, as torch's ``pinned_use_cuda_host_register`` path
requires) and ``cudaPointerGetAttributes`` (the memory type must be Host). A chunk that fails
its check is unregistered at once, the chunks before it are rolled back, the error is drained
from the libcudart handle that recorded it (docs/cuda-runtime.md §6), and register raises
naming the query and its code.
"""

from __future__ import annotations

import ctypes
import ctypes.util

MEMORY_TYPE_HOST = 1


class PointerAttributes(ctypes.Structure):
    """struct cudaPointerAttributes (cuda_runtime_api.h), with room for its reserved words."""

    _fields_ = [("type", ctypes.c_int), ("device", ctypes.c_int),
                ("devicePointer", ctypes.c_void_p), ("hostPointer", ctypes.c_void_p),
                ("reserved", ctypes.c_long * 8)]


class Libcudart:
    """The libcudart calls this pool needs, with their C signatures."""

    def __init__(self) -> None:
        self.lib = ctypes.CDLL(ctypes.util.find_library("cudart") or "libcudart.so")
        vp, sz, uint = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint
        for name, args in (("cudaHostRegister", [vp, sz, uint]), ("cudaHostUnregister", [vp]),
                           ("cudaHostGetDevicePointer", [vp, vp, uint]),
                           ("cudaPointerGetAttributes", [vp, vp]),
                           ("cudaGetLastError", []), ("cudaGetErrorName", [ctypes.c_int])):
            fn = getattr(self.lib, name)
            fn.argtypes = args
            fn.restype = ctypes.c_char_p if name == "cudaGetErrorName" else ctypes.c_int

    def name(self, rc: int) -> str:
        """Drain the error this handle holds and name it."""
        self.lib.cudaGetLastError()
        raw = self.lib.cudaGetErrorName(rc)
        return raw.decode() if raw else f"error {rc}"

    def verify(self, ptr: int) -> str | None:
        """None when the chunk at ``ptr`` is pinned and mapped at its own address, else why."""
        dev = ctypes.c_void_p()
        rc = self.lib.cudaHostGetDevicePointer(ctypes.byref(dev), ptr, 0)
        if rc:
            return f"cudaHostGetDevicePointer returned {rc} ({self.name(rc)})"
        if dev.value != ptr:
            return f"cudaHostGetDevicePointer gave {dev.value:#x} for {ptr:#x}"
        attrs = PointerAttributes()
        rc = self.lib.cudaPointerGetAttributes(ctypes.byref(attrs), ptr)
        if rc:
            return f"cudaPointerGetAttributes returned {rc} ({self.name(rc)})"
        if attrs.type != MEMORY_TYPE_HOST:
            return f"cudaPointerGetAttributes reports memory type {attrs.type}, not Host"
        return None

    def release(self, ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """Unregister in reverse order; what could not be released."""
        kept = []
        for base, size in reversed(ranges):
            rc = self.lib.cudaHostUnregister(base)
            if rc:
                self.name(rc)
                kept.append((base, size))
        return kept[::-1]


def register(ptr: int, nbytes: int, *, granularity: int | None,
             chunk_limit: int) -> list[tuple[int, int]]:
    rt = Libcudart()
    unit = granularity or 4096
    step = chunk_limit // unit * unit
    done: list[tuple[int, int]] = []
    for off in range(0, nbytes, step):
        size = min(step, nbytes - off)
        rc = rt.lib.cudaHostRegister(ptr + off, size, 0)
        why = f"cudaHostRegister returned {rc} ({rt.name(rc)})" if rc else rt.verify(ptr + off)
        if why is None:
            done.append((ptr + off, size))
            continue
        chunk = [] if rc else [(ptr + off, size)]     # registered but not verified: release it
        left = rt.release(done + chunk)
        raise RuntimeError(f"chunk at offset {off} ({size} bytes): {why}"
                           + (f"; {len(left)} chunk(s) could not be released" if left else ""))
    return done


def teardown(ranges: list[tuple[int, int]]) -> None:
    ranges[:] = Libcudart().release(ranges)
