"""Mooncake-style registration that keeps what it reached the store and the NICs through.

``mooncake_cached`` is correct: it binds ``MooncakeDistributedStore`` and pyverbs at import,
reads ``MC_MAX_MR_SIZE`` at import, and caches the NICs' ``max_mr_size`` in a module global on
first use, as code that computes Mooncake's MR limit itself does (docs/mooncake-verbs.md §1.6).
``mooncake_fresh`` computes the same each call. ``keeps_first_store`` is broken in a way no
door can forward: it keeps the first store object it is given and registers with it in every
later scenario, a store set up against an earlier deployment.
"""

from __future__ import annotations

import os
from typing import Any

from mooncake.store import MooncakeDistributedStore
from pyverbs.device import Context, get_device_list

from kvreg.harness.mooncake import reference

MC_MAX_MR_SIZE = os.environ.get("MC_MAX_MR_SIZE")
_NIC_LIMITS: list[int] | None = None
_STORE: Any = None


def _nic_limits() -> list[int]:
    global _NIC_LIMITS
    if _NIC_LIMITS is None:
        sizes = []
        for dev in get_device_list():
            with Context(name=dev.name) as ctx:
                sizes.append(int(ctx.query_device().max_mr_size))
        _NIC_LIMITS = sizes
    return _NIC_LIMITS


def mooncake_cached(store: Any, ptr: int, nbytes: int, *, max_mr_size: int | None = None,
                    granularity: int | None) -> list[tuple[int, int]]:
    if not isinstance(store, MooncakeDistributedStore):
        raise TypeError(f"not a MooncakeDistributedStore: {store!r}")
    if max_mr_size is None:
        max_mr_size = reference.effective_mr_limit(MC_MAX_MR_SIZE, _nic_limits())
    return reference.register(store, ptr, nbytes, max_mr_size=max_mr_size,
                              granularity=granularity)


def mooncake_cached_teardown(store: Any, ranges: list[tuple[int, int]]) -> None:
    reference.teardown_or_raise(store, ranges)


def mooncake_fresh(store: Any, ptr: int, nbytes: int, *, max_mr_size: int | None = None,
                   granularity: int | None) -> list[tuple[int, int]]:
    return reference.register(store, ptr, nbytes, max_mr_size=max_mr_size,
                              granularity=granularity)


def mooncake_fresh_teardown(store: Any, ranges: list[tuple[int, int]]) -> None:
    reference.teardown_or_raise(store, ranges)


def keeps_first_store(store: Any, ptr: int, nbytes: int, *, max_mr_size: int | None = None,
                      granularity: int | None) -> list[tuple[int, int]]:
    global _STORE
    if _STORE is None:
        _STORE = store
    return reference.register(_STORE, ptr, nbytes, max_mr_size=max_mr_size,
                              granularity=granularity)


def keeps_first_store_teardown(store: Any, ranges: list[tuple[int, int]]) -> None:
    reference.teardown_or_raise(_STORE if _STORE is not None else store, ranges)
