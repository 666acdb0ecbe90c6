"""The rank side: one process of a :class:`~.group.RankGroup`, which joins the process group
once and then runs the functions it is sent until it is told to leave.

Messages are plain tuples so that the group and its ranks share no class that a reload could
split: the rank answers ``(READY, None)`` once ``torch.distributed`` is initialised (or
``(FAILED, text)``), then ``("returned", value)`` or ``("raised", (type, message,
traceback))`` per call. A rank that ends its call with a ``BaseException`` that is not an
``Exception`` (``SystemExit``…) reports it and leaves: the code meant the process to end.
"""

from __future__ import annotations

import datetime
import faulthandler
import importlib
import os
import signal
import traceback
from collections.abc import Iterable
from contextlib import suppress
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from kvreg.harness.run.lifecycle import die_with_parent

from .environment import LOOPBACK, omp_threads, rank_env

__all__ = ["FAILED", "READY", "RankSetup", "rank_main", "resolve"]

READY = "kvreg-rank-ready"
FAILED = "kvreg-rank-failed"


@dataclass(frozen=True)
class RankSetup:
    """What a rank needs to join: the store's socket is rank 0's (``listen_fd``); ``env`` is
    the process configuration's environment; ``timeout_s`` bounds gloo's collectives."""

    rank: int
    world_size: int
    port: int
    listen_fd: int | None
    env: dict[str, str]
    timeout_s: float


def resolve(spec: str) -> Any:
    """``package.module:function`` -> the function (imported in the rank, so that the
    caller never imports the code under test)."""
    module, sep, name = spec.partition(":")
    if not sep or not module or not name:
        raise ValueError(f"expected a function as module:function; got {spec!r}")
    target: Any = importlib.import_module(module)
    for part in name.split("."):
        target = getattr(target, part)
    return target


def _join(setup: RankSetup) -> None:
    """Set torchrun's variables and join the gloo group through the loopback store."""
    import torch
    import torch.distributed as dist

    threads = omp_threads(setup.world_size, setup.env, os.environ.get("OMP_NUM_THREADS"))
    os.environ.update(setup.env)
    if threads is not None:
        os.environ["OMP_NUM_THREADS"] = threads
        # torch read the variable when the caller imported it, before this fork
        with suppress(ValueError):
            torch.set_num_threads(int(threads))
    os.environ.update(rank_env(setup.rank, setup.world_size, setup.port))
    timeout = datetime.timedelta(seconds=setup.timeout_s)
    store = dist.TCPStore(  # type: ignore[attr-defined]
        LOOPBACK, setup.port, setup.world_size, setup.rank == 0, timeout,
        master_listen_fd=setup.listen_fd)
    dist.init_process_group("gloo", store=store, rank=setup.rank,
                            world_size=setup.world_size, timeout=timeout)


def _call(spec: str, args: tuple[Any, ...]) -> tuple[str, Any]:
    try:
        return "returned", resolve(spec)(*args)
    except BaseException as exc:
        text = "".join(traceback.format_exception(exc))
        return "raised", (type(exc).__name__, str(exc), text)


def _send(conn: Connection, message: tuple[str, Any]) -> None:
    """Send ``message``; a returned value that cannot be pickled becomes a raised error (the
    pickling happens before anything is written, so the pipe stays in step)."""
    try:
        conn.send(message)
    except (TypeError, AttributeError, ValueError) as exc:     # pickle's errors
        if message[0] != "returned":
            raise
        conn.send(("raised", (type(exc).__name__, f"the returned value cannot be sent back: "
                                                  f"{exc}", "")))


def _serve(conn: Connection) -> None:
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        spec, args = message
        outcome = _call(spec, args)
        _send(conn, outcome)
        if outcome[0] == "raised" and outcome[1][0] in ("SystemExit", "KeyboardInterrupt"):
            return


def _close_fds(fds: Iterable[int]) -> None:
    """Close what this rank inherited but is not its own (its siblings' pipes, the store's
    socket in ranks other than 0): a sibling's pipe held open here would hide its end."""
    for fd in fds:
        with suppress(OSError):
            os.close(fd)


def rank_main(conn: Connection, setup: RankSetup, foreign: tuple[int, ...]) -> None:
    """One rank's life: join the group, report ready, serve calls, leave the group."""
    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C is the caller's to handle
    faulthandler.disable()
    os.dup2(2, 1)              # what the code prints never reaches a report on stdout
    _close_fds(foreign)
    try:
        _join(setup)
    except Exception as exc:
        conn.send((FAILED, f"{type(exc).__name__}: {exc}"))
        return
    conn.send((READY, None))
    _serve(conn)
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()
