"""The faithful upstream algorithm (sglang_upstream.py) with the error path as SGLang's
current code has it: the failing code is formatted with ``cudaGetErrorString(int(rc))``,
which torch's binding rejects with TypeError (spec/cuda-runtime.md §7; the same TypeError is
in the traceback of sglang PR #38509), and any exception inside the loop takes the rollback
path again (spec/pools.md §1.1), so chunks already rolled back are unregistered twice.
Expected rules: error-reported everywhere a register fails; unregister-not-a-live-base as
well where chunks were registered before the failing one."""

from __future__ import annotations

import os
import warnings
from typing import Any

import torch

ATTR = "_sglang_cuda_host_registered_ranges"


def _unregister_ranges(cudart: Any, ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    failed = [(p, s) for p, s in reversed(ranges) if int(cudart.cudaHostUnregister(p)) != 0]
    failed.reverse()
    return failed


def _chunk_gb() -> int:
    """As SGLang's EnvInt(256) reads the variable (srt/environ.py EnvField.get): unset, or a
    value int() cannot parse ("" too, with a warning), is the default."""
    raw = os.environ.get("SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB")
    try:
        return int(raw) if raw is not None else 256
    except ValueError:
        warnings.warn(f"Invalid value for SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB: {raw!r}, "
                      'using default "256"', stacklevel=2)
        return 256


def register(buffer: Any, registration_granularity_bytes: int | None = None) -> None:
    cudart = torch.cuda.cudart()
    base = buffer.data_ptr()
    total = buffer.numel() * buffer.element_size()
    limit = max(_chunk_gb(), 1) << 30
    g = registration_granularity_bytes
    if g is None:
        chunk = total
    else:
        if g <= 0:
            raise ValueError(f"registration_granularity_bytes must be positive, got {g}")
        if g > limit:
            raise ValueError("Host registration granularity exceeds the configured chunk "
                             f"limit: granularity={g}, chunk_limit={limit}")
        chunk = (limit // g) * g
    done: list[tuple[int, int]] = []
    off = 0
    try:
        while off < total:
            size = min(chunk, total - off)
            rc = int(cudart.cudaHostRegister(base + off, size, 0))
            if rc != 0:
                failed = _unregister_ranges(cudart, done)
                if failed:
                    setattr(buffer, ATTR, failed)
                errstr = cudart.cudaGetErrorString(int(rc))
                raise RuntimeError(f"cudaHostRegister failed (rc={rc}, {errstr}) at "
                                   f"offset={off} size={size} (total={total}, "
                                   f"chunk_limit={chunk})")
            done.append((base + off, size))
            off += size
    except BaseException:
        _unregister_ranges(cudart, done)
        raise
    setattr(buffer, ATTR, done)


def teardown(buffer: Any) -> None:
    cudart = torch.cuda.cudart()
    ranges = getattr(buffer, ATTR, None)
    if ranges is None:
        ranges = [(buffer.data_ptr(), buffer.numel() * buffer.element_size())]
    if not ranges:
        return
    setattr(buffer, ATTR, _unregister_ranges(cudart, ranges))
