"""Host memory for the real-hardware tier: prefaulted, page-aligned, and sized to the machine.

cudaHostRegister's cost is dominated by faulting in and pinning pages; a buffer whose pages
were never touched measures the kernel's page allocator instead of the driver (spec
docs/cuda-runtime.md §12.10 asks for *prefaulted* memory). So buffers come from an anonymous
``mmap`` (page-aligned, like the pools of vLLM and LMCache) and every page is written once
before it is handed out. Nothing here imports CUDA.
"""

from __future__ import annotations

import mmap
import os
import resource
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

__all__ = ["PAGE", "available_memory", "cap_ipc_lock", "memlock_limit", "prefaulted",
           "temporary_memlock"]

PAGE = mmap.PAGESIZE
GiB = 1 << 30


def prefaulted(nbytes: int, *, fill: int = 0) -> np.ndarray:
    """A page-aligned ``uint8`` array of ``nbytes`` whose every page is already mapped.

    The array owns its mapping (numpy keeps the ``mmap`` alive), so dropping the array
    releases the memory. ValueError for a size that is not positive.
    """
    if nbytes <= 0:
        raise ValueError(f"a host buffer needs a positive size, got {nbytes}")
    region = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
                       prot=mmap.PROT_READ | mmap.PROT_WRITE)
    arr = np.frombuffer(region, dtype=np.uint8, count=nbytes)
    # one write per page faults it in; a full memset would cost as much again
    arr[::PAGE] = fill
    if fill:
        arr[:] = fill
    return arr


def available_memory() -> int:
    """Bytes the kernel says can be allocated without swapping (``MemAvailable``).

    Falls back to the free physical pages where ``/proc/meminfo`` is missing.
    """
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def memlock_limit() -> tuple[int | None, int | None]:
    """``RLIMIT_MEMLOCK`` (soft, hard) in bytes; None means unlimited."""
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)

    def norm(v: int) -> int | None:
        return None if v == resource.RLIM_INFINITY else int(v)

    return norm(soft), norm(hard)


@contextmanager
def temporary_memlock(nbytes: int) -> Iterator[int]:
    """Lower the soft ``RLIMIT_MEMLOCK`` to ``nbytes`` for the block, then restore it.

    This is the in-process form of ``ulimit -l`` (docs/cuda-runtime.md §12.9): an unprivileged
    process may
    lower its soft limit and raise it again up to the hard limit, so the probe can run
    without a shell. Yields the soft limit actually set (never above the hard limit).
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    new = nbytes if hard == resource.RLIM_INFINITY else min(nbytes, hard)
    resource.setrlimit(resource.RLIMIT_MEMLOCK, (new, hard))
    try:
        yield new
    finally:
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (soft, hard))


def cap_ipc_lock() -> bool | None:
    """Whether this process holds CAP_IPC_LOCK (bit 14 of CapEff), which lifts the limit.

    None where ``/proc/self/status`` cannot be read.
    """
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> 14 & 1)
    except OSError:
        pass
    return None
