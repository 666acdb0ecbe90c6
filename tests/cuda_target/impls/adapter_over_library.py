"""A thin adapter (generic style) over a library pool module (pinlib/common.py), CORRECT:
failures are kept, retried by the next teardown and reported with their code."""

from __future__ import annotations

from typing import Any

from pinlib.common import pin, unpin

STRICT = False


def register(cudart: Any, ptr: int, nbytes: int, *, granularity: int | None,
             chunk_limit: int) -> list[tuple[int, int]]:
    unit = granularity or 4096
    return pin(cudart, ptr, nbytes, chunk_limit // unit * unit, STRICT)


def teardown(cudart: Any, ranges: list[tuple[int, int]]) -> None:
    unpin(cudart, ranges, STRICT)


# the library keeps failed ranges for the next teardown: a repeatable teardown, declared
teardown.repeatable = True   # type: ignore[attr-defined]
