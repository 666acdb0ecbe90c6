"""What the mooncake_engine-style implementations here share: one checked batch
registration, unregistering a list of bases (returns unread, or the refused ones kept for a
later round) and a batch teardown that raises on a nonzero return. Each implementation keeps
only its bug or its way of being correct. Imported by its siblings (kvreg puts an
implementation's folder first on ``sys.path``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def batch_register(engine: Any, ptrs: list[int], lens: list[int]) -> None:
    """One ``batch_register_memory``; a nonzero return raised."""
    rc = engine.batch_register_memory(ptrs, lens)
    if rc != 0:
        raise RuntimeError(f"batch_register_memory returned {rc}")


def unregister_all(engine: Any, bases: Iterable[int]) -> None:
    """``unregister_memory`` of each base in the order given, its return unread."""
    for base in bases:
        engine.unregister_memory(base)


def refused(engine: Any, bases: Iterable[int]) -> list[int]:
    """``unregister_memory`` of each base: those the engine refused (a nonzero return)."""
    return [b for b in bases if engine.unregister_memory(b) != 0]


def keep_refused(engine: Any, handle: list[int]) -> list[int]:
    """A repeatable teardown's round: unregister each base of ``handle`` and keep in it only
    those the engine refused, for the next round to retry."""
    handle[:] = refused(engine, handle)
    return handle


def batch_teardown(engine: Any, handle: list[int]) -> None:
    """One ``batch_unregister_memory`` of the bases register returned; nonzero raised."""
    if engine.batch_unregister_memory(handle) != 0:
        raise RuntimeError("batch_unregister_memory failed")
