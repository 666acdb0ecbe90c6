"""Argument checks shared by the pool geometries.

Every failure raises GeometryError naming the field and what was expected, so a scenario file with
an impossible geometry is rejected before any buffer is planned or registered.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kvreg.fakes.dtypes import DType, as_dtype

__all__ = [
    "GeometryError",
    "NoPageMetaError",
    "check_dtype",
    "check_flag",
    "check_layout",
    "check_nonneg_int",
    "check_positive_int",
    "check_shape",
]


class GeometryError(ValueError):
    """An impossible or unsupported pool geometry; the message names the offending field."""


class NoPageMetaError(GeometryError):
    """The pool/layout has no per-page pointer list: upstream raises or returns None (§4)."""


def _as_int(field: str, value: object, expected: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise GeometryError(f"{field} must be {expected}, got {value!r}")
    return int(value)


def check_positive_int(field: str, value: object) -> int:
    """Return value as int; raise when it is not an integer > 0."""
    number = _as_int(field, value, "a positive integer")
    if number <= 0:
        raise GeometryError(f"{field} must be a positive integer, got {number}")
    return number


def check_nonneg_int(field: str, value: object) -> int:
    """Return value as int; raise when it is not an integer >= 0."""
    number = _as_int(field, value, "a non-negative integer")
    if number < 0:
        raise GeometryError(f"{field} must be a non-negative integer, got {number}")
    return number


def check_flag(field: str, value: object) -> bool:
    """Return value when it is a bool (a typo such as "false" must not read as True)."""
    if not isinstance(value, bool):
        raise GeometryError(f"{field} must be true or false, got {value!r}")
    return value


def check_dtype(field: str, value: object) -> DType:
    """Resolve a dtype name or object through kvreg.fakes.dtypes."""
    try:
        return as_dtype(value)
    except (TypeError, ValueError) as exc:
        raise GeometryError(f"{field}: {exc}") from None


def check_layout(pool_type: str, layout: object, allowed: Sequence[str], why: str = "") -> str:
    """Return layout when this pool type supports it; `why` cites the spec for the rejection."""
    if not isinstance(layout, str) or layout not in allowed:
        note = f" ({why})" if why else ""
        raise GeometryError(
            f"layout must be one of {', '.join(allowed)} for pool type {pool_type}, "
            f"got {layout!r}{note}"
        )
    return layout


def check_shape(field: str, value: object, *, allow_zero: bool) -> tuple[int, ...]:
    """Return a state/tensor shape as a tuple of ints (at least one dimension)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or len(value) == 0:
        raise GeometryError(f"{field} must be a non-empty sequence of integers, got {value!r}")
    check = check_nonneg_int if allow_zero else check_positive_int
    return tuple(check(f"{field}[{i}]", dim) for i, dim in enumerate(value))
