"""BROKEN (sglang style): SGLang's chunked registration with the chunk-limit variable read in
ways deployments break. SGLang 0.5.23 reads SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB with
EnvInt(256) (srt/environ.py: unset -> 256; "" cannot be parsed -> a warning and 256) and
floors it at 1 GiB (pool_host/common.py: max(value, 1) * 1024**3).

- ``register_unparsed``: ``int(os.environ.get(VAR, "256")) << 30``, no floor. Empty: ValueError;
  0: a limit of 0 bytes, below every granularity. Expected rule: unexpected-error in the
  ``chunk_env`` scenarios empty-default-256gib and zero-floors-to-1gib.
- ``register_unset_unlimited``: unset read as "no limit" (one call for the whole buffer).
  Expected rule: chunk-over-limit in unset-default-256gib (SGLang's contract, which the sglang
  style keeps), and the per-call ceiling's refusal (2) in unset-over-ceiling-r580.
"""

from __future__ import annotations

import os
from typing import Any

import torch

VAR = "SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB"
ATTR = "_chunk_env_readers_ranges"


def _register(buffer: Any, g: int | None, limit: int | None) -> None:
    cudart = torch.cuda.cudart()
    base, total = buffer.data_ptr(), buffer.numel() * buffer.element_size()
    if g is not None and limit is not None and g > limit:
        raise ValueError(f"granularity {g} exceeds the chunk limit {limit}")
    chunk = total if g is None or limit is None else limit // g * g
    done: list[tuple[int, int]] = []
    for off in range(0, total, chunk):
        size = min(chunk, total - off)
        rc = int(cudart.cudaHostRegister(base + off, size, 0))
        if rc:
            for p, _ in reversed(done):
                cudart.cudaHostUnregister(p)
            text = cudart.cudaGetErrorString(cudart.cudaError(rc))
            raise RuntimeError(f"cudaHostRegister failed (rc={rc}, {text}) at offset={off}")
        done.append((base + off, size))
    setattr(buffer, ATTR, done)


def register_unparsed(buffer: Any, registration_granularity_bytes: int | None = None) -> None:
    limit = int(os.environ.get(VAR, "256")) << 30     # the bug: "" raises, 0 is not floored
    _register(buffer, registration_granularity_bytes, limit)


def register_unset_unlimited(buffer: Any,
                             registration_granularity_bytes: int | None = None) -> None:
    raw = os.environ.get(VAR)
    limit = max(int(raw or 256), 1) << 30 if raw is not None else None   # the bug: unset
    _register(buffer, registration_granularity_bytes, limit)


def teardown(buffer: Any) -> None:
    cudart = torch.cuda.cudart()
    ranges = getattr(buffer, ATTR, [])
    setattr(buffer, ATTR, [(p, s) for p, s in reversed(ranges)
                           if int(cudart.cudaHostUnregister(p))][::-1])
