"""kvreg's reference RDMA / Mooncake registration and SGLang's multi-buffer helpers.

MRs no larger than the effective limit (docs/mooncake-verbs.md §1.6: min of MC_MAX_MR_SIZE
or its 1 TiB default and every opened device's max_mr_size; FastDeploy's 1–6 GiB clamp as
an option, §2.1), seams on a multiple of the object stride so no KV block straddles two MRs
(§1.7), all or nothing with rollback, errors raised rather than logged. The
``register`` / ``teardown`` pair follows the ``mooncake`` implementation style of the
public contract.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

from kvreg.harness.plan.chunking import plan_chunks
from kvreg.harness.run.registration import (
    RegistrationError,
    TeardownError,
    release_in_reverse,
)

__all__ = ["DEFAULT_MAX_MR_SIZE", "MultiBufferError", "effective_mr_limit", "iter_pool_buffers",
           "own_mr_limit", "pack_multi_buffer_meta", "register", "teardown",
           "uses_multi_buffer"]

GiB = 1 << 30
DEFAULT_MAX_MR_SIZE = 1 << 40          # GlobalConfig::max_mr_size, 1 TiB (§1.6)
FASTDEPLOY_DEFAULT = 4 * GiB           # §2.1: unset or 0 -> 4 GiB
FASTDEPLOY_MIN, FASTDEPLOY_MAX = 1 * GiB, 6 * GiB


def _atoll(text: str) -> int:
    """C atoll: optional sign and leading digits; anything else stops the parse (0 if none)."""
    text = text.strip()
    sign, i = 1, 0
    if text[:1] in "+-":
        sign, i = (-1 if text[0] == "-" else 1), 1
    digits = ""
    while i < len(text) and text[i].isdigit():
        digits += text[i]
        i += 1
    return sign * int(digits) if digits else 0


def effective_mr_limit(mc_max_mr_size: int | str | None,
                       device_max_mr_sizes: Sequence[int] = (), *,
                       protocol: str = "rdma", fastdeploy_clamp: bool = False) -> int:
    """The largest MR the store will accept for one registration.

    ``mc_max_mr_size`` is the MC_MAX_MR_SIZE value (string as in the environment, or int).
    Mooncake takes it when > 0, else keeps 1 TiB; with ``protocol="rdma"`` every opened
    device lowers it to its max_mr_size (§1.6). ``fastdeploy_clamp`` applies FastDeploy's own
    reading first: unset/0 -> 4 GiB, below 1 GiB -> 1 GiB, above 6 GiB -> 6 GiB (§2.1).
    """
    raw = _atoll(mc_max_mr_size) if isinstance(mc_max_mr_size, str) else (mc_max_mr_size or 0)
    if fastdeploy_clamp:
        value = FASTDEPLOY_DEFAULT if raw <= 0 else min(max(raw, FASTDEPLOY_MIN), FASTDEPLOY_MAX)
    else:
        value = raw if raw > 0 else DEFAULT_MAX_MR_SIZE
    if protocol == "rdma":
        for dev in device_max_mr_sizes:
            if dev > 0:
                value = min(value, int(dev))
    return value


def _unregister_all(store: Any, ranges: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
    return release_in_reverse(store.unregister_buffer, ranges)


def own_mr_limit() -> int:
    """The effective MR limit computed here, as Mooncake computes it at setup (§1.6):
    ``MC_MAX_MR_SIZE`` from the environment (1 TiB when unset or 0), lowered to the
    ``max_mr_size`` every RDMA device reports through pyverbs (none without an RDMA stack)."""
    sizes: list[int] = []
    try:
        from pyverbs.device import Context, get_device_list
        devices = get_device_list()
    except Exception:   # no RDMA stack: only the environment limits
        devices = []
    for dev in devices:
        with Context(name=dev.name) as ctx:
            sizes.append(int(ctx.query_device().max_mr_size))
    return effective_mr_limit(os.environ.get("MC_MAX_MR_SIZE"), sizes)


def register(store: Any, ptr: int, nbytes: int, *, max_mr_size: int | None = None,
             granularity: int | None) -> list[tuple[int, int]]:
    """Register ``[ptr, ptr+nbytes)`` with the store in MRs of at most ``max_mr_size``
    (None: computed here by :func:`own_mr_limit`).

    Seams fall on multiples of ``granularity`` (the object stride, e.g. FastDeploy's
    ``cache_buffer_stride_bytes``). A non-zero return rolls back every earlier MR and raises
    RegistrationError naming the rc, offset, size and total.
    """
    if max_mr_size is None:
        max_mr_size = own_mr_limit()
    chunks = plan_chunks(nbytes, max_mr_size, granularity)
    done: list[tuple[int, int]] = []
    for off, size in chunks:
        try:
            rc = int(store.register_buffer(ptr + off, size))
        except BaseException:
            _unregister_all(store, done)
            raise
        if rc:
            failed = _unregister_all(store, done)
            extra = ("; rollback could not release " + ", ".join(
                f"ptr={p:#x} size={s} (rc={c})" for p, s, c in failed)) if failed else ""
            raise RegistrationError(
                f"register_buffer failed (rc={rc}) at offset={off} size={size} "
                f"(total={nbytes}, max_mr_size={max_mr_size}); rolled back "
                f"{len(done) - len(failed)} of {len(done)} earlier MR(s){extra}",
                code=rc, offset=off, size=size, total=nbytes,
                unreleased=[(p, s) for p, s, _ in failed])
        done.append((ptr + off, size))
    return done


def teardown(store: Any, ranges: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """Unregister each MR base once (reverse order); ``ranges`` keeps only the failures."""
    failed = _unregister_all(store, list(ranges))
    ranges[:] = [(p, s) for p, s, _ in failed]
    return failed


# it keeps only its failures, for a later round to retry: declared (run/contract.py)
teardown.repeatable = True  # type: ignore[attr-defined]


def teardown_or_raise(store: Any, ranges: list[tuple[int, int]]) -> None:
    failed = teardown(store, ranges)
    if failed:
        raise TeardownError("unregister_buffer failed for " + ", ".join(
            f"ptr={p:#x} size={s} (rc={c})" for p, s, c in failed), failed)


# it keeps only its failures, for a later round to retry: declared (run/contract.py)
teardown_or_raise.repeatable = True  # type: ignore[attr-defined]


# -- SGLang Mooncake backend helpers (docs/mooncake-verbs.md §3.2, §3.4) ---------------------------

class MultiBufferError(ValueError):
    """Pointer/size lists that cannot be packed per key."""


def iter_pool_buffers(pool: Any) -> Iterator[Any]:
    """Each allocation of a host pool once: ``get_hybrid_pool_buffer()`` or ``[kv_buffer]``.

    Views into one allocation (MHA's K and V halves) are deduplicated by their storage's
    (data_ptr, nbytes), as the store registers whole allocations (docs/pools.md §2.9).
    """
    getter = getattr(pool, "get_hybrid_pool_buffer", None)
    buffers = getter() if getter is not None else [getattr(pool, "kv_buffer", None)]
    seen: set[tuple[int, int]] = set()
    for buf in buffers:
        if buf is None:
            continue
        storage = buf.untyped_storage() if hasattr(buf, "untyped_storage") else None
        if storage is not None:
            nbytes = storage.nbytes()
            key = (int(storage.data_ptr()), int(nbytes() if callable(nbytes) else nbytes))
        else:
            key = (int(buf.data_ptr()), int(buf.numel() * buf.element_size()))
        if key in seen:
            continue
        seen.add(key)
        yield buf


def uses_multi_buffer(ptrs: Sequence[Any]) -> bool:
    """True iff the list is non-empty and its first element is itself a sequence (§3.4)."""
    return bool(ptrs) and isinstance(ptrs[0], Sequence) and not isinstance(ptrs[0], str | bytes)


def pack_multi_buffer_meta(keys: Sequence[str], ptrs: Sequence[int], sizes: Sequence[int]
                           ) -> tuple[list[list[int]], list[list[int]]]:
    """Group flat pointer/size lists into one list per key, ``len(ptrs) // len(keys)`` each.

    Upstream leaves the edge cases open; kvreg rejects them: no keys, no pointers, pointer
    and size lists of different lengths, a pointer count that is not a multiple of the key
    count, duplicate keys (which would alias two objects), and non-positive sizes.
    """
    if not keys:
        raise MultiBufferError("no keys to pack pointers for")
    if not ptrs:
        raise MultiBufferError(f"no pointers for {len(keys)} key(s)")
    if len(ptrs) != len(sizes):
        raise MultiBufferError(f"{len(ptrs)} pointers but {len(sizes)} sizes")
    if len(ptrs) % len(keys):
        raise MultiBufferError(f"{len(ptrs)} pointers do not divide among {len(keys)} keys "
                               f"({len(ptrs) % len(keys)} left over)")
    if len(set(keys)) != len(keys):
        dup = sorted({k for k in keys if list(keys).count(k) > 1})
        raise MultiBufferError(f"duplicate keys in one batch: {dup[:5]}")
    bad = [i for i, s in enumerate(sizes) if int(s) <= 0]
    if bad:
        raise MultiBufferError(f"non-positive size at index {bad[0]}")
    n = len(ptrs) // len(keys)
    return ([list(map(int, ptrs[i * n:(i + 1) * n])) for i in range(len(keys))],
            [list(map(int, sizes[i * n:(i + 1) * n])) for i in range(len(keys))])
