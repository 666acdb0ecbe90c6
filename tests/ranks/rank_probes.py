"""Functions run inside rank processes by tests/ranks and benchmarks (``rank_probes:NAME``):
each does what real rank code does (agree by a MIN all-reduce, wait in a barrier) or fails
the way a rank fails (raises, exits, is killed, never returns) on one chosen rank."""

from __future__ import annotations

import os
import signal
import socket
import time
from typing import Any

import torch
import torch.distributed as dist

TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                 "MASTER_PORT")
_KEPT: list[socket.socket] = []


def agree_min(value: int) -> dict[str, Any]:
    """The MIN of every rank's ``value`` (how SGLang agrees on a host budget), after a
    barrier; with what the rank sees of its identity."""
    tensor = torch.tensor([value], dtype=torch.int64)
    dist.all_reduce(tensor, op=dist.ReduceOp.MIN)
    dist.barrier()
    return {"min": int(tensor.item()), "rank": dist.get_rank(),
            "world": dist.get_world_size(), "pid": os.getpid(),
            "env": {name: os.environ.get(name) for name in TORCHRUN_VARS}}


def pid() -> int:
    return os.getpid()


def raise_on(failing: int) -> str:
    if dist.get_rank() == failing:
        raise ValueError(f"rank {failing} refuses")
    dist.barrier()
    return "passed"


def exit_on(failing: int) -> str:
    if dist.get_rank() == failing:
        os._exit(1)
    dist.barrier()
    return "passed"


def sigkill_on(failing: int) -> str:
    if dist.get_rank() == failing:
        os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()
    return "passed"


def sleep_on(sleeping: int) -> str:
    if dist.get_rank() == sleeping:
        while True:
            time.sleep(3600)
    dist.barrier()
    return "passed"


def unpicklable() -> Any:
    return lambda: None


def listen_everywhere() -> int:
    """Open a socket on every interface and keep it: what the loopback check must catch."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("0.0.0.0", 0))
    sock.listen(1)
    _KEPT.append(sock)
    return int(sock.getsockname()[1])


def noop() -> None:
    return None
