"""Pool sizes a machine can hold: rejected at validation with a sentence, never a traceback.

A host pool is one or more mmap'ed allocations in the process's user address space: 2^47 bytes
(128 TiB) with x86-64 4-level paging or arm64 48-bit VAs, 2^57 bytes (128 PiB) with 5-level
paging, the largest any shipping CPU offers. Upstream indexes pages and tokens with int64 (torch
index tensors), so a page or token count at or above 2^63 cannot even be named. Real buffers
(``memory = "real"``) take RAM, so they must fit it and kvreg's own cap for them.
"""

from __future__ import annotations

import os

from kvreg.harness.pools import PoolGeometry

__all__ = ["ADDRESS_LIMIT", "FOUR_LEVEL_LIMIT", "INDEX_LIMIT", "REAL_LIMIT", "format_bytes",
           "machine_ram", "real_memory_problem", "size_problem"]

FOUR_LEVEL_LIMIT = 1 << 47    # 128 TiB: x86-64 4-level paging, arm64 48-bit VA
ADDRESS_LIMIT = 1 << 57       # 128 PiB: x86-64 5-level paging (LA57), the largest user space
INDEX_LIMIT = 1 << 63         # int64 page / token indices
REAL_LIMIT = 256 << 20        # memory = "real" above this is refused: a run must not eat the RAM


def format_bytes(n: int) -> str:
    for unit, size in (("PiB", 1 << 50), ("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20),
                       ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def size_problem(geometry: PoolGeometry) -> str | None:
    """Why no machine could allocate this pool, or None when one could."""
    pages = geometry.page_count
    size = getattr(geometry, "size", None)
    if pages >= INDEX_LIMIT or (isinstance(size, int) and size >= INDEX_LIMIT):
        return (f"the pool has {pages} pages, more than the int64 page/token indices upstream "
                "uses can address (2^63)")
    total = geometry.total_nbytes
    if total > ADDRESS_LIMIT:
        return (f"the pool needs {total} bytes ({format_bytes(total)}), more than the 2^57-byte "
                f"(128 PiB) user address space of a 5-level-paging host (2^47 bytes, 128 TiB, "
                "with 4-level paging); no machine can map it")
    return None


def machine_ram() -> int | None:
    """Physical memory of this machine in bytes (None where the OS does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def real_memory_problem(geometry: PoolGeometry, cap: int = REAL_LIMIT) -> str | None:
    """Why ``memory = "real"`` cannot hold this pool here (above ``cap`` or the RAM), or None."""
    total = geometry.total_nbytes
    ram = machine_ram()
    if ram is not None and total > ram:
        return (f'memory = "real" needs {total} bytes ({format_bytes(total)}) of RAM, more than '
                f"this machine's {format_bytes(ram)}; use memory = \"virtual\"")
    if total > cap:
        return (f'memory = "real" needs {total} bytes ({format_bytes(total)}); real buffers are '
                f"limited to {format_bytes(cap)} so a run cannot eat the RAM; use "
                'memory = "virtual"')
    return None
