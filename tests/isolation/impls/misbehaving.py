"""Implementations (generic style) that end a run in every way a process can end.

Each ``register_*`` registers the first two chunks of the buffer correctly and then does
its one thing, so a verdict must say how far the run got ("after 2 cudaHostRegister
calls"). ``register`` is the correct control: whole-page chunks, reverse-order rollback.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
from typing import Any


def _chunks(ptr: int, nbytes: int, granularity: int | None,
            limit: int) -> list[tuple[int, int]]:
    g = granularity or 1
    chunk = max(limit // g, 1) * g
    return [(ptr + off, min(chunk, nbytes - off)) for off in range(0, nbytes, chunk)]


def _unregister(cudart: Any, ranges: list[tuple[int, int]]) -> None:
    for p, _ in reversed(ranges):
        cudart.cudaHostUnregister(p)


def _register(cudart: Any, ptr: int, nbytes: int, granularity: int | None, limit: int,
              *, stop_after: int | None = None) -> list[tuple[int, int]]:
    done: list[tuple[int, int]] = []
    for i, (p, size) in enumerate(_chunks(ptr, nbytes, granularity, limit)):
        if i == stop_after:
            return done
        rc = int(cudart.cudaHostRegister(p, size, 0))
        if rc:
            _unregister(cudart, done)
            raise RuntimeError(f"cudaHostRegister failed (rc={rc}) at {p:#x}")
        done.append((p, size))
    return done


def register(cudart: Any, ptr: int, nbytes: int, *, granularity: int | None,
             chunk_limit: int) -> list[tuple[int, int]]:
    return _register(cudart, ptr, nbytes, granularity, chunk_limit)


def teardown(cudart: Any, ranges: list[tuple[int, int]]) -> None:
    _unregister(cudart, ranges)
    ranges.clear()


def _two_then(cudart: Any, ptr: int, nbytes: int, granularity: int | None,
              chunk_limit: int) -> list[tuple[int, int]]:
    return _register(cudart, ptr, nbytes, granularity, chunk_limit, stop_after=2)


def register_raises(cudart: Any, ptr: int, nbytes: int, *, granularity: int | None,
                    chunk_limit: int) -> list[tuple[int, int]]:
    done = _two_then(cudart, ptr, nbytes, granularity, chunk_limit)
    _unregister(cudart, done)
    raise ValueError("this implementation gives up after two chunks")


def register_sys_exit(cudart: Any, ptr: int, nbytes: int, *, granularity: int | None,
                      chunk_limit: int) -> list[tuple[int, int]]:
    _two_then(cudart, ptr, nbytes, granularity, chunk_limit)
    sys.exit(3)


def register_os_exit(cudart: Any, ptr: int, nbytes: int, *, granularity: int | None,
                     chunk_limit: int) -> list[tuple[int, int]]:
    _two_then(cudart, ptr, nbytes, granularity, chunk_limit)
    os._exit(0)


def register_sigkill(cudart: Any, ptr: int, nbytes: int, *, granularity: int | None,
                     chunk_limit: int) -> list[tuple[int, int]]:
    _two_then(cudart, ptr, nbytes, granularity, chunk_limit)
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable")


def register_segfault(cudart: Any, ptr: int, nbytes: int, *, granularity: int | None,
                      chunk_limit: int) -> list[tuple[int, int]]:
    _two_then(cudart, ptr, nbytes, granularity, chunk_limit)
    ctypes.string_at(0)          # reads address 0: SIGSEGV
    raise AssertionError("unreachable")


def register_keyboard_interrupt(cudart: Any, ptr: int, nbytes: int, *,
                                granularity: int | None,
                                chunk_limit: int) -> list[tuple[int, int]]:
    _two_then(cudart, ptr, nbytes, granularity, chunk_limit)
    raise KeyboardInterrupt


def register_loops(cudart: Any, ptr: int, nbytes: int, *, granularity: int | None,
                   chunk_limit: int) -> list[tuple[int, int]]:
    _two_then(cudart, ptr, nbytes, granularity, chunk_limit)
    while True:                  # no runtime call: only the time limit can stop it
        pass


def register_loops_calling(cudart: Any, ptr: int, nbytes: int, *, granularity: int | None,
                           chunk_limit: int) -> list[tuple[int, int]]:
    done = _two_then(cudart, ptr, nbytes, granularity, chunk_limit)
    while True:                  # retries the same chunk forever, slowly (below the budget)
        cudart.cudaHostRegister(done[0][0], done[0][1], 0)
        time.sleep(0.01)


def register_allocates(cudart: Any, ptr: int, nbytes: int, *, granularity: int | None,
                       chunk_limit: int) -> list[tuple[int, int]]:
    _two_then(cudart, ptr, nbytes, granularity, chunk_limit)
    hoard = []
    while True:                  # a bookkeeping table that grows without bound
        hoard.append(bytearray(64 << 20))


def register_dies_when_chunked(cudart: Any, ptr: int, nbytes: int, *,
                               granularity: int | None,
                               chunk_limit: int) -> list[tuple[int, int]]:
    if nbytes <= chunk_limit:
        return register(cudart, ptr, nbytes, granularity=granularity, chunk_limit=chunk_limit)
    _two_then(cudart, ptr, nbytes, granularity, chunk_limit)
    os._exit(0)


def register_chatty(cudart: Any, ptr: int, nbytes: int, *, granularity: int | None,
                    chunk_limit: int) -> list[tuple[int, int]]:
    print(f"registering {nbytes} bytes")      # stdout: must not reach a report on stdout
    return register(cudart, ptr, nbytes, granularity=granularity, chunk_limit=chunk_limit)


def register_hangs_when_chunked(cudart: Any, ptr: int, nbytes: int, *,
                                granularity: int | None,
                                chunk_limit: int) -> list[tuple[int, int]]:
    """Correct below the limit; above it, says so in the file named by KVREG_TEST_MARKER
    (so a test knows the run is in this scenario) and never returns."""
    if nbytes <= chunk_limit:
        return register(cudart, ptr, nbytes, granularity=granularity, chunk_limit=chunk_limit)
    _two_then(cudart, ptr, nbytes, granularity, chunk_limit)
    with open(os.environ["KVREG_TEST_MARKER"], "w") as f:
        f.write(str(os.getpid()))
    while True:
        time.sleep(0.05)


def register_leaves_a_thread(cudart: Any, ptr: int, nbytes: int, *,
                             granularity: int | None,
                             chunk_limit: int) -> list[tuple[int, int]]:
    """Correct, but leaves a background thread that could act during a later scenario."""
    import threading

    threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
    return register(cudart, ptr, nbytes, granularity=granularity, chunk_limit=chunk_limit)


def register_closes_fds(cudart: Any, ptr: int, nbytes: int, *, granularity: int | None,
                        chunk_limit: int) -> list[tuple[int, int]]:
    """Closes every file descriptor above stderr (as a daemonising library might), then
    runs on: its process is alive but cannot answer."""
    _two_then(cudart, ptr, nbytes, granularity, chunk_limit)
    os.closerange(3, 65536)
    while True:
        time.sleep(0.05)
