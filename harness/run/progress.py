"""Where a run is: the step and buffer it is in, and how many calls it made per API.

The runner reports its steps to a :class:`Progress`; in-process the default one only keeps
them, in a supervised worker :class:`SharedProgress` writes them into memory the
supervisor can read after the worker died, so an error verdict can say what happened, when
and how far the run got ("during register of kv_buffer, after 2 cudaHostRegister calls").
Writing costs one ctypes store per step and one counter increment per recorded call: no
pipe message, no system call.
"""

from __future__ import annotations

import ctypes
from typing import Any

__all__ = ["MAX_APIS", "Progress", "ProgressBlock", "SharedProgress", "describe_calls",
           "read_calls"]

MAX_APIS = 32
_STEP_BYTES = 200
_NAME_BYTES = 48


class Progress:
    """The runner's progress sink; keeps the last step and the call counts in this process."""

    def __init__(self) -> None:
        self.where = "while kvreg set the run up"
        self.in_implementation = False
        self.counts: dict[str, int] = {}

    def step(self, what: str, buffer: str | None = None) -> None:
        """The run enters ``what``: the implementation's ``register`` or ``teardown round N``
        of ``buffer``, or one of kvreg's own steps (``the page copies``, ``the checks``)."""
        self.where = f"during {what} of {buffer}" if buffer else f"during {what}"
        self.in_implementation = buffer is not None

    def watch(self, trace: Any) -> None:
        """Count every call ``trace`` records from now on (a fresh count per run)."""
        self.counts = {}
        counts = self.counts

        def seen(api: str) -> None:
            counts[api] = counts.get(api, 0) + 1

        trace.observer = seen

    def calls(self) -> list[tuple[str, int]]:
        """(API, calls) in the order the APIs were first called."""
        return list(self.counts.items())


class ProgressBlock(ctypes.Structure):
    """The shared-memory layout one worker writes and its supervisor reads."""

    _fields_ = [("step", ctypes.c_char * _STEP_BYTES),
                ("napis", ctypes.c_int),
                ("names", (ctypes.c_char * _NAME_BYTES) * MAX_APIS),
                ("counts", ctypes.c_longlong * MAX_APIS)]


class SharedProgress(Progress):
    """Progress written into a :class:`ProgressBlock` shared with the supervisor."""

    def __init__(self, block: ProgressBlock) -> None:
        super().__init__()
        self.block = block
        self.reset()

    def reset(self) -> None:
        """Forget the previous scenario (the worker is reused)."""
        self.block.napis = 0
        self.block.step = b"while kvreg set the run up"
        self.in_implementation = False
        self.index: dict[str, int] = {}

    def step(self, what: str, buffer: str | None = None) -> None:
        super().step(what, buffer)
        self.block.step = self.where.encode()[:_STEP_BYTES - 1]

    def watch(self, trace: Any) -> None:
        block, index = self.block, self.index
        counts = block.counts

        def seen(api: str) -> None:
            i = index.get(api)
            if i is None:
                i = len(index)
                if i >= MAX_APIS:    # more APIs than slots: the last slot sums the rest
                    i = MAX_APIS - 1
                else:
                    block.names[i].value = api.encode()[:_NAME_BYTES - 1]
                    counts[i] = 0
                    block.napis = i + 1
                index[api] = i
            counts[i] += 1

        trace.observer = seen

    def calls(self) -> list[tuple[str, int]]:
        return read_calls(self.block)


def read_calls(block: ProgressBlock) -> list[tuple[str, int]]:
    """(API, calls) from a block, in first-call order."""
    n = min(int(block.napis), MAX_APIS)
    return [(block.names[i].value.decode(errors="replace"), int(block.counts[i]))
            for i in range(n)]


def describe_calls(calls: list[tuple[str, int]]) -> str:
    """``after 2 cudaHostRegister calls`` / ``before any runtime call``."""
    made = [(api, n) for api, n in calls if n]
    if not made:
        return "before any runtime call"
    shown = [f"{n} {api} call{'s' if n != 1 else ''}" for api, n in made[:3]]
    rest = sum(n for _, n in made[3:])
    if rest:
        shown.append(f"{rest} other call{'s' if rest != 1 else ''}")
    text = shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " and " + shown[-1]
    return f"after {text}"
