"""A faithful re-implementation of SGLang's merged algorithm (docs/pools.md §1.1), written
from the spec's description: one call when no granularity is given, otherwise chunks of
floor(LIM / G) * G, reverse-order rollback, failures stored back on the buffer."""

from __future__ import annotations

import logging
import os
import warnings
from typing import Any

import torch

ATTR = "_sglang_cuda_host_registered_ranges"
log = logging.getLogger(__name__)


def _chunk_gb() -> int:
    """As SGLang 0.5.23's EnvInt(256) reads the variable (srt/environ.py EnvField.get): unset
    is the default; a value int() cannot parse ("" too) is the default, with a warning."""
    raw = os.environ.get("SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB")
    if raw is None:
        return 256
    try:
        return int(raw)
    except ValueError:
        warnings.warn(f"Invalid value for SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB: {raw!r}, "
                      'using default "256"', stacklevel=2)
        return 256


def _unregister_ranges(cudart: Any, ranges: list[tuple[int, int]], operation: str
                       ) -> list[tuple[int, int]]:
    failed = []
    for ptr, size in reversed(ranges):
        rc = int(cudart.cudaHostUnregister(ptr))
        if rc != 0:
            failed.append((ptr, size))
            log.warning("cudaHostUnregister failed during %s (rc=%d) for ptr=%#x size=%d",
                        operation, rc, ptr, size)
    failed.reverse()
    return failed


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
    while off < total:
        size = min(chunk, total - off)
        rc = int(cudart.cudaHostRegister(base + off, size, 0))
        if rc != 0:
            failed = _unregister_ranges(cudart, done, "registration rollback")
            if failed:
                setattr(buffer, ATTR, failed)
            errstr = cudart.cudaGetErrorString(cudart.cudaError(rc))
            raise RuntimeError(f"cudaHostRegister failed (rc={rc}, {errstr}) at offset={off} "
                               f"size={size} (total={total}, chunk_limit={chunk}); host buffer "
                               "is not pinned and device transfers may silently return stale "
                               "data.")
        done.append((base + off, size))
        off += size
    setattr(buffer, ATTR, done)


def teardown(buffer: Any) -> None:
    cudart = torch.cuda.cudart()
    ranges = getattr(buffer, ATTR, None)
    if ranges is None:
        ranges = [(buffer.data_ptr(), buffer.numel() * buffer.element_size())]
    if not ranges:
        return
    setattr(buffer, ATTR, _unregister_ranges(cudart, ranges, "host-pool destroy"))
