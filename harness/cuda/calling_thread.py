"""The thread the cuda target calls the implementation on (docs/cuda-runtime.md §13.4).

A serving engine often registers its host pool from a thread that never called CUDA (a
connector's heartbeat thread re-registering after a restart, LMCache PR #5169; a transfer
engine's registration threads, kvcache-ai/Mooncake PR #2034): there, driver calls find no
current context and fail with CUDA_ERROR_INVALID_CONTEXT. The scenario option
``profile_options = { register_thread = "worker" }`` runs each register and teardown call on
a fresh thread, so per-thread state (the driver's current context, and anything the code
keeps per thread) starts empty, as it does on such a thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["call_on_register_thread"]

T = TypeVar("T")


def call_on_register_thread(fake: Any, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on the thread the scenario's profile names; what it raises is raised
    here, with its own traceback."""
    if getattr(getattr(fake, "profile", None), "register_thread", "main") != "worker":
        return fn(*args)
    result: list[T] = []
    raised: list[BaseException] = []

    def run() -> None:
        try:
            result.append(fn(*args))
        except BaseException as exc:   # re-raised in the calling thread below
            raised.append(exc)

    worker = threading.Thread(target=run, name="kvreg-register-thread")
    worker.start()
    worker.join()
    if raised:
        raise raised[0]
    return result[0]
