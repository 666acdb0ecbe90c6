"""A correct sglang-style registration that registers and unregisters its chunks from a pool
of threads, with the cudart module kept in a global shared by them: still all-or-nothing
(every chunk that succeeded is released when any failed, whatever the order the threads ran
in), and the raise names the failing code. Its verdicts must equal the sequential twin's."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch
from caching import RANGES, _chunk_limit, _slab, plan

_CUDART: Any = None
_THREADS = 4


def _cudart() -> Any:
    global _CUDART
    if _CUDART is None:
        _CUDART = torch.cuda.cudart()
    return _CUDART


def register(buffer: Any, granularity: int | None = None) -> None:
    cudart = _cudart()
    limit = _chunk_limit()
    base, total = buffer.data_ptr(), buffer.numel() * buffer.element_size()
    g = granularity if granularity is not None else _slab(buffer, limit)
    chunks = plan(total, g, limit)

    def one(chunk: tuple[int, int]) -> int:
        return int(cudart.cudaHostRegister(base + chunk[0], chunk[1], 0))

    with ThreadPoolExecutor(_THREADS) as pool:
        codes = list(pool.map(one, chunks))
    done = [(base + off, size) for (off, size), rc in zip(chunks, codes, strict=True) if rc == 0]
    failed = [(off, size, rc) for (off, size), rc in zip(chunks, codes, strict=True) if rc != 0]
    if failed:
        with ThreadPoolExecutor(_THREADS) as pool:
            list(pool.map(lambda r: cudart.cudaHostUnregister(r[0]), done))
        off, size, rc = failed[0]
        raise RuntimeError(f"cudaHostRegister failed (rc={rc}) at offset={off} size={size}")
    setattr(buffer, RANGES, done)


def teardown(buffer: Any) -> None:
    cudart = _cudart()
    ranges = list(getattr(buffer, RANGES, []))
    with ThreadPoolExecutor(_THREADS) as pool:
        codes = list(pool.map(lambda r: int(cudart.cudaHostUnregister(r[0])), ranges))
    failed = [r for r, rc in zip(ranges, codes, strict=True) if rc != 0]
    setattr(buffer, RANGES, failed)
    if failed:
        raise RuntimeError(f"cudaHostUnregister failed for {len(failed)} chunk(s)")
