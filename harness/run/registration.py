"""What the CUDA and the Mooncake reference registrations share: their errors, reverse release.

Both targets' references raise the same :class:`RegistrationError` / :class:`TeardownError`
and release in reverse order, so tests and callers catch one type whatever the target.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["RegistrationError", "TeardownError", "release_in_reverse", "result_code"]


class RegistrationError(RuntimeError):
    """A chunk failed; everything registered before it was rolled back (or is listed)."""

    def __init__(self, message: str, *, code: int, offset: int, size: int, total: int,
                 unreleased: list[tuple[int, int]]) -> None:
        super().__init__(message)
        self.code = code
        self.offset = offset
        self.size = size
        self.total = total
        self.unreleased = unreleased


class TeardownError(RuntimeError):
    """Some chunks could not be unregistered; they are kept for a later retry."""

    def __init__(self, message: str, failed: list[tuple[int, int, int]]) -> None:
        super().__init__(message)
        self.failed = failed


def result_code(result: Any) -> int:
    """The error code of either face's result (tuple for cuda-python, enum for torch)."""
    if isinstance(result, tuple):
        return int(result[0])
    return int(result)


def release_in_reverse(unregister: Callable[[int], Any],
                       ranges: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """Unregister each base in reverse order; (ptr, size, code) of failures, ascending.

    Shared by the CUDA and the Mooncake reference: ``unregister(ptr)`` returns a code in
    either face's form (an int, an enum, or a tuple led by one).
    """
    failed = []
    for ptr, size in reversed(ranges):
        code = result_code(unregister(ptr))
        if code:
            failed.append((ptr, size, code))
    failed.reverse()
    return failed
