"""kvreg's reference chunked CUDA host registration: aligned, all-or-nothing, exact teardown.

Correct for every pool layout (docs/pools.md §1.1 and §5): chunks no larger than the limit,
every seam on a multiple of the copy unit, rollback in reverse order on any failure with an
error that names the call, code, string, offset, size and total, and a teardown that
unregisters each chunk's base exactly once and reports what it could not release. It works
through either runtime face: ``torch.cuda.cudart()`` (enum results) or
``cuda.bindings.runtime`` (tuple results).

The ``register`` / ``teardown`` pair follows the ``generic`` implementation style of the
public contract; ``register_buffer`` / ``teardown_buffer`` follow the ``sglang`` style.
"""

from __future__ import annotations

import os
from typing import Any

from kvreg.fakes.cuda.errors import error_string
from kvreg.harness.plan.chunking import plan_chunks
from kvreg.harness.run.registration import (
    RegistrationError,
    TeardownError,
    release_in_reverse,
    result_code,
)

__all__ = ["RANGES_ATTR", "RegistrationError", "TeardownError", "chunk_limit_from_env",
           "register", "register_buffer", "teardown", "teardown_buffer"]

RANGES_ATTR = "_kvreg_registered_ranges"
ENV_CHUNK_GB = "SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB"
GiB = 1 << 30


def _text(cudart: Any, code: int) -> str:
    """cudaGetErrorString through the same face, falling back to kvreg's table."""
    try:
        if hasattr(cudart, "cudaError"):            # torch face wants the enum object
            return str(cudart.cudaGetErrorString(cudart.cudaError(code)))
        res = cudart.cudaGetErrorString(code)
        text = res[1] if isinstance(res, tuple) else res
        return str(text.decode() if isinstance(text, bytes) else text)
    except Exception:   # a broken error-string call must not hide the real failure
        pass
    return error_string(code)


def _drain(cudart: Any) -> None:
    """Clear the pending error where the face allows it (docs/cuda-runtime.md §6).

    torch's binding exposes no cudaGetLastError, so its pending error stays; cuda-python's
    does, and leaving it set would poison the next unrelated check.
    """
    get_last = getattr(cudart, "cudaGetLastError", None)
    if get_last is not None and not hasattr(cudart, "cudaError"):
        get_last()


def _unregister_all(cudart: Any, ranges: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
    return release_in_reverse(cudart.cudaHostUnregister, ranges)


def register(cudart: Any, ptr: int, nbytes: int, *, granularity: int | None,
             chunk_limit: int) -> list[tuple[int, int]]:
    """Register ``[ptr, ptr+nbytes)`` in aligned chunks; all or nothing.

    ``granularity`` is the copy unit the seams must respect (kvreg's pool geometry gives it
    for every layout); None means byte seams, which is only safe for pools whose transfers
    never cross the limit. Raises ValueError before any call for an impossible granularity,
    and RegistrationError after rolling back when a call fails.
    """
    chunks = plan_chunks(nbytes, chunk_limit, granularity)
    done: list[tuple[int, int]] = []
    for off, size in chunks:
        try:
            code = result_code(cudart.cudaHostRegister(ptr + off, size, 0))
        except BaseException:
            _unregister_all(cudart, done)
            raise
        if code:
            _drain(cudart)
            text = _text(cudart, code)
            failed = _unregister_all(cudart, done)
            leftover = [(p, s) for p, s, _ in failed]
            extra = ""
            if failed:
                extra = "; rollback could not release " + ", ".join(
                    f"ptr={p:#x} size={s} (rc={c}, {_text(cudart, c)})" for p, s, c in failed)
            raise RegistrationError(
                f"cudaHostRegister failed (rc={code}, {text}) at offset={off} size={size} "
                f"(total={nbytes}, chunk_limit={chunks[0][1] if chunks else chunk_limit}); "
                f"rolled back {len(done) - len(failed)} of {len(done)} earlier chunk(s){extra}",
                code=code, offset=off, size=size, total=nbytes, unreleased=leftover)
        done.append((ptr + off, size))
    return done


def teardown(cudart: Any, ranges: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """Unregister every chunk base once (reverse order); idempotent.

    ``ranges`` is edited in place to hold only what could not be released, so a second
    teardown makes no calls after a full success. Returns the failures (ptr, size, code).
    """
    failed = _unregister_all(cudart, list(ranges))
    ranges[:] = [(p, s) for p, s, _ in failed]
    if failed:
        _drain(cudart)
    return failed


# it keeps only its failures, for a later round to retry: declared (run/contract.py)
teardown.repeatable = True  # type: ignore[attr-defined]


# -- the sglang implementation style ---------------------------------------------------------

def chunk_limit_from_env(default_gb: int = 256) -> int:
    """SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB in whole GiB, floored at 1 (docs/pools.md §1.1).

    Unset or empty is the default, as SGLang reads it (srt/environ.py EnvInt: "" cannot be
    parsed, so its default); 0 or less is 1 GiB. Any other text is an error here (SGLang
    warns and takes the default), so that a typo is not silently 256 GiB.
    """
    raw = os.environ.get(ENV_CHUNK_GB)
    try:
        gb = int(raw) if raw is not None and raw.strip() else default_gb
    except ValueError:
        raise ValueError(f"{ENV_CHUNK_GB} must be a whole number of GiB, got {raw!r}") from None
    return max(gb, 1) * GiB


def register_buffer(buffer: Any, registration_granularity_bytes: int | None = None) -> None:
    """SGLang-style entry: cudart from ``torch.cuda.cudart()``, limit from the environment.

    Stores the chunk list on the buffer (attribute ``_kvreg_registered_ranges``).
    """
    import torch

    cudart = torch.cuda.cudart()  # type: ignore[no-untyped-call]
    nbytes = int(buffer.numel()) * int(buffer.element_size())
    ranges = register(cudart, int(buffer.data_ptr()), nbytes,
                      granularity=registration_granularity_bytes,
                      chunk_limit=chunk_limit_from_env())
    setattr(buffer, RANGES_ATTR, ranges)


def teardown_buffer(buffer: Any) -> None:
    """SGLang-style teardown: release every chunk once; a second call makes no calls."""
    import torch

    ranges = getattr(buffer, RANGES_ATTR, None)
    if not ranges:
        return
    failed = teardown(torch.cuda.cudart(), ranges)  # type: ignore[no-untyped-call]
    if failed:
        raise TeardownError(
            "cudaHostUnregister failed for " + ", ".join(
                f"ptr={p:#x} size={s} (rc={c})" for p, s, c in failed), failed)


# it keeps only its failures, for a later round to retry: declared (run/contract.py)
teardown_buffer.repeatable = True  # type: ignore[attr-defined]
