"""FastDeploy's chunked ``register_buffer`` (PRs #7416/#7540, docs/mooncake-verbs.md §2.1), written
from the spec: ``ceil(size / max)`` calls at fixed offsets ``ptr + i * max``, not aligned to
``cache_buffer_stride_bytes``; a non-zero return fails an ``assert`` with no rollback of the
chunks before it. Teardown unregisters every chunk once (upstream's ``close`` is a no-op; the
leak is another implementation's bug), so the scenarios catch the chunking bugs alone."""

from __future__ import annotations

from typing import Any


def register(store: Any, ptr: int, nbytes: int, *, max_mr_size: int,
             granularity: int | None) -> list[tuple[int, int]]:
    ranges = []
    chunks = -(-nbytes // max_mr_size)
    for i in range(chunks):
        chunk_ptr = ptr + i * max_mr_size
        size = min(max_mr_size, nbytes - i * max_mr_size)
        ret = store.register_buffer(chunk_ptr, size)
        assert ret == 0, f"Mooncake register_buffer chunk {i} failed: ret={ret}"
        ranges.append((chunk_ptr, size))
    return ranges


def teardown(store: Any, ranges: list[tuple[int, int]]) -> None:
    """Unregister each base once; keep the ones that failed for the next round."""
    ranges[:] = [(p, s) for p, s in ranges if store.unregister_buffer(p) != 0]
