"""Sizes as people read them, exact where rounding would hide the difference that matters.

"256.00 GiB" for a chunk of 256 GiB minus 827 392 bytes reads as the limit itself; "8.39
MiB" for a last call says nothing of its bytes. A size that is a whole number of its unit is
shown as such ("256 GiB"); any other size keeps two decimals and adds its exact byte count.
"""

from __future__ import annotations

__all__ = ["size_text"]

_UNITS = (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))


def size_text(n: int) -> str:
    """``256 GiB``, ``255.99 GiB (274877079552 bytes)``, ``512 B``."""
    for unit, size in _UNITS:
        if n >= size:
            if n % size == 0:
                return f"{n // size} {unit}"
            return f"{n / size:.2f} {unit} ({n} bytes)"
    return f"{n} B"
