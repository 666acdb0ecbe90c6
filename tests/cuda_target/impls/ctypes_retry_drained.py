"""CORRECT variant (ctypes style): a failed chunk is retried on smaller granularity
multiples, and every failure is drained from the libcudart instance that recorded it.

Written as a work list: a range that fails is drained with ``cudaGetLastError`` on the same
handle (docs/cuda-runtime.md §6) and split in two; after too many failures, or when a range
cannot be split, everything is rolled back and the error is raised with its name.
"""

from __future__ import annotations

import ctypes
import ctypes.util

MAX_FAILURES = 6


class Libcudart:
    """The libcudart calls this pool needs, with their C signatures."""

    def __init__(self) -> None:
        self.lib = ctypes.CDLL(ctypes.util.find_library("cudart") or "libcudart.so")
        for name, args in (("cudaHostRegister", [ctypes.c_void_p, ctypes.c_size_t,
                                                 ctypes.c_uint]),
                           ("cudaHostUnregister", [ctypes.c_void_p]),
                           ("cudaGetLastError", []), ("cudaGetErrorName", [ctypes.c_int])):
            fn = getattr(self.lib, name)
            fn.argtypes = args
            fn.restype = ctypes.c_char_p if name == "cudaGetErrorName" else ctypes.c_int

    def failed(self, rc: int) -> str:
        """Drain the error this handle holds and name it."""
        self.lib.cudaGetLastError()
        raw = self.lib.cudaGetErrorName(rc)
        return raw.decode() if raw else f"error {rc}"


def register(ptr: int, nbytes: int, *, granularity: int | None,
             chunk_limit: int) -> list[tuple[int, int]]:
    rt = Libcudart()
    unit = granularity or 4096
    step = chunk_limit // unit * unit
    work = [(off, min(step, nbytes - off)) for off in range(0, nbytes, step)][::-1]
    done: list[tuple[int, int]] = []
    failures = 0
    while work:
        off, size = work.pop()
        rc = rt.lib.cudaHostRegister(ptr + off, size, 0)
        if rc == 0:
            done.append((ptr + off, size))
            continue
        name = rt.failed(rc)
        failures += 1
        head = size // unit // 2 * unit
        if failures > MAX_FAILURES or head == 0:
            for base, _ in reversed(done):
                if rt.lib.cudaHostUnregister(base) != 0:
                    rt.lib.cudaGetLastError()
            raise RuntimeError(f"cudaHostRegister({ptr + off:#x}, {size}) failed: {name} "
                               f"(rc={rc})")
        work += [(off + head, size - head), (off, head)]
    return sorted(done)


def teardown(ranges: list[tuple[int, int]]) -> None:
    rt = Libcudart()
    kept = []
    for base, size in reversed(ranges):
        rc = rt.lib.cudaHostUnregister(base)
        if rc != 0:
            rt.failed(rc)
            kept.append((base, size))
    ranges[:] = kept[::-1]
