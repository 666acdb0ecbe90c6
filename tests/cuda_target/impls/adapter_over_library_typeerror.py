"""BROKEN twin of adapter_over_library: the library's error path raises TypeError (it adds an
int to a str), in register's rollback and in teardown alike.

Expected: error-reported for register, teardown-raised for teardown, each at the library's
line that raised (pinlib/common.py), not at this adapter's line that called it."""

from __future__ import annotations

from typing import Any

from pinlib.common import pin, unpin

STRICT = True


def register(cudart: Any, ptr: int, nbytes: int, *, granularity: int | None,
             chunk_limit: int) -> list[tuple[int, int]]:
    unit = granularity or 4096
    return pin(cudart, ptr, nbytes, chunk_limit // unit * unit, STRICT)


def teardown(cudart: Any, ranges: list[tuple[int, int]]) -> None:
    unpin(cudart, ranges, STRICT)


# the library keeps failed ranges for the next teardown: a repeatable teardown, declared
teardown.repeatable = True   # type: ignore[attr-defined]
