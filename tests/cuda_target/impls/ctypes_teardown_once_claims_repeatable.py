"""BROKEN (ctypes style): the once-only teardown of ``ctypes_teardown_once`` declared
repeatable (``teardown.repeatable = True``) although it never forgets what it released, so a
second teardown unregisters every chunk base again (713 cudaErrorHostMemoryNotRegistered).

Expected rules: unregister-not-a-live-base ("which was already released"), teardown-raised
("teardown #2 ... raised RuntimeError").
"""

from __future__ import annotations

from ctypes_teardown_once import register
from ctypes_teardown_once import teardown as _once

__all__ = ["register", "teardown"]


def teardown(ranges: list[tuple[int, int]]) -> None:
    _once(ranges)


teardown.repeatable = True   # type: ignore[attr-defined]   # the false promise
