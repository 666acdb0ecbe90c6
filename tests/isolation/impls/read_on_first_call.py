"""A correct implementation that reads its chunk limit once, on its first call, not at
import: ``SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB`` kept in a module global from then on, as
code that reads its configuration lazily does. In one deployment that is right; a worker
that carried the value into a scenario of another limit would register chunks over that
limit (a ``fail`` that is kvreg's doing, not the code's).
"""

from __future__ import annotations

import os
from typing import Any

import torch
from caching import register_chunks, release_chunks

_LIMIT: int | None = None


def _chunk_limit() -> int:
    global _LIMIT
    if _LIMIT is None:
        _LIMIT = max(int(os.environ.get("SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB", "256")), 1) << 30
    return _LIMIT


def sglang_register(buffer: Any, granularity: int | None = None) -> None:
    register_chunks(torch.cuda.cudart(), buffer, granularity, _chunk_limit())


def sglang_teardown(buffer: Any) -> None:
    release_chunks(torch.cuda.cudart(), buffer)
