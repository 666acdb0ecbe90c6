"""Chunked pinning through torch's cudart, as a library pool module writes it.

``pin`` and ``unpin`` keep and retry what failed (the keep-and-retry contract, docs/pools.md
§1.1); ``STRICT`` names the broken error path: on a failure it builds its message as
``"..." + rc``, which raises TypeError instead of reporting the error (the int-to-str bug
class of the SGLang error path)."""

from __future__ import annotations

from typing import Any


def _failed(what: str, rc: int, strict: bool) -> RuntimeError:
    if strict:
        return RuntimeError(what + " failed with error " + rc)   # type: ignore[operator]
    return RuntimeError(f"{what} failed with error {rc}")


def pin(cudart: Any, ptr: int, nbytes: int, step: int, strict: bool) -> list[tuple[int, int]]:
    done: list[tuple[int, int]] = []
    for off in range(0, nbytes, step):
        size = min(step, nbytes - off)
        rc = int(cudart.cudaHostRegister(ptr + off, size, 0))
        if rc:
            done[:] = [r for r in reversed(done) if int(cudart.cudaHostUnregister(r[0]))]
            raise _failed("cudaHostRegister", rc, strict)
        done.append((ptr + off, size))
    return done


def unpin(cudart: Any, ranges: list[tuple[int, int]], strict: bool) -> None:
    kept = []
    first = 0
    for base, size in reversed(ranges):
        rc = int(cudart.cudaHostUnregister(base))
        if rc:
            kept.append((base, size))
            first = first or rc
    ranges[:] = kept[::-1]
    if first:
        raise _failed("cudaHostUnregister", first, strict)
