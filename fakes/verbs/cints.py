"""Cython's conversions of Python ints to C integer types, as pyverbs' setters apply them.

A value out of range raises OverflowError and a non-int TypeError, before any verbs call,
exactly where the real extension types would (docs/mooncake-verbs.md §4.4, §4.5).
"""

from __future__ import annotations

from typing import Any

__all__ = ["SIZE_MAX", "c_int", "c_size_t", "c_uint"]

SIZE_MAX = (1 << 64) - 1


def c_size_t(value: Any, what: str) -> int:
    """Cython's conversion to ``size_t``: ints only, 0..2^64-1, else TypeError/OverflowError."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError("an integer is required")
    if value < 0:
        raise OverflowError("can't convert negative value to size_t")
    if value > SIZE_MAX:
        raise OverflowError("value too large to convert to size_t")
    return int(value)


def c_int(value: Any, what: str) -> int:
    """Cython's conversion to C ``int``: offsets of 2 GiB and more overflow (§4.4)."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError("an integer is required")
    if not -(1 << 31) <= value < (1 << 31):
        raise OverflowError("value too large to convert to int")
    return int(value)


def c_uint(value: Any, what: str, bits: int = 32) -> int:
    """Cython's conversion to an unsigned C integer of ``bits`` bits."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError("an integer is required")
    if value < 0:
        raise OverflowError("can't convert negative value to unsigned int")
    if value >= 1 << bits:
        raise OverflowError("value too large to convert to unsigned int")
    return int(value)
