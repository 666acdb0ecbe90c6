"""BROKEN (generic style): chunk bases computed from the allocation's alignment.

The first chunk starts at the buffer's base rounded down to 2 MiB, on the assumption that a
pool tensor is hugepage-aligned. kvreg's virtual buffers used to be, so this passed; torch's
own large CPU tensors sit 64 bytes into a page (c10 ``alloc_cpu.cpp``: ``posix_memalign(64)``
over glibc's mmapped chunk), so the first range reaches below the buffer into memory the pool
does not own (unmapped here: the call fails with 1; another allocation's pages on a busy
process: they get pinned).

Expected rule: range-outside-buffer, on every scenario with ``[pool] base_offset``; on a
2 MiB-aligned base the rounding is a no-op and the code is correct.
"""

from __future__ import annotations

from typing import Any

HUGE_PAGE = 2 << 20


def register(cudart: Any, ptr: int, nbytes: int, *, granularity: int | None,
             chunk_limit: int) -> list[tuple[int, int]]:
    if granularity is not None and granularity > chunk_limit:
        raise ValueError(f"granularity {granularity} exceeds the chunk limit {chunk_limit}")
    chunk = chunk_limit if granularity is None else (chunk_limit // granularity) * granularity
    start = ptr & ~(HUGE_PAGE - 1)              # the bug: assumes ptr % 2 MiB == 0
    end = ptr + nbytes
    done: list[tuple[int, int]] = []
    for base in range(start, end, chunk):
        size = min(chunk, end - base)
        rc = int(cudart.cudaHostRegister(base, size, 0))
        if rc:
            for p, _ in reversed(done):
                cudart.cudaHostUnregister(p)
            raise RuntimeError(f"cudaHostRegister({base:#x}, {size}) failed (rc={rc})")
        done.append((base, size))
    return done


def teardown(cudart: Any, ranges: list[tuple[int, int]]) -> None:
    kept = [(p, s) for p, s in reversed(ranges) if int(cudart.cudaHostUnregister(p))]
    ranges[:] = kept[::-1]
