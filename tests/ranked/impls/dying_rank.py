"""A rank that never finishes its register: ``register_killed`` SIGKILLs rank 1's process
(a segfault, the OOM killer), ``register_hangs`` never returns on rank 1. kvreg's answer is
an ``error`` naming rank 1 and what happened, never a hung run."""

from __future__ import annotations

import os
import signal
import threading
from typing import Any


def _pin(cudart: Any, ptr: int, nbytes: int) -> list[tuple[int, int]]:
    if int(cudart.cudaHostRegister(ptr, nbytes, 0)):
        raise RuntimeError("cudaHostRegister failed")
    return [(ptr, nbytes)]


def register_killed(cudart: Any, ptr: int, nbytes: int, *, granularity: int | None = None,
                    chunk_limit: int | None = None) -> list[tuple[int, int]]:
    if os.environ["RANK"] == "1":
        os.kill(os.getpid(), signal.SIGKILL)
    return _pin(cudart, ptr, nbytes)


def register_hangs(cudart: Any, ptr: int, nbytes: int, *, granularity: int | None = None,
                   chunk_limit: int | None = None) -> list[tuple[int, int]]:
    if os.environ["RANK"] == "1":
        threading.Event().wait()
    return _pin(cudart, ptr, nbytes)


def teardown(cudart: Any, ranges: list[tuple[int, int]]) -> None:
    ranges[:] = [(p, s) for p, s in reversed(ranges) if int(cudart.cudaHostUnregister(p))]
