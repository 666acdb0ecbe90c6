"""BROKEN: teardown does nothing, so every chunk stays pinned after the pool is destroyed.

Expected rule: leak ("was never released by teardown").
"""

from __future__ import annotations

from typing import Any

from page_aligned import register_chunks

ATTR = "_broken_ranges"


def register(buffer: Any, registration_granularity_bytes: int | None = None) -> None:
    """Correct, as SGLang's (page_aligned/): the bug is in teardown."""
    register_chunks(buffer, registration_granularity_bytes, ATTR)


def teardown(buffer: Any) -> None:
    """The bug: the pool's destructor forgets to unregister anything."""
    setattr(buffer, ATTR, [])
