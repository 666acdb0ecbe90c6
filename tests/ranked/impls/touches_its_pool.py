"""An engine that writes its whole pool before pinning it (``torch.zeros``, a first fill),
through the fake host the ranks share (KVREG_FAKE_HOST): on a host whose RAM cannot hold
every rank's pool the OOM killer kills the rank with the most resident memory (docs/host.md
§1). kvreg's answer is an ``error`` naming the rank the host killed, never a verdict on the
others' code."""

from __future__ import annotations

import os
from typing import Any

import torch.distributed as dist

from kvreg.fakes.host.fake_host import FakeHost


def register(cudart: Any, ptr: int, nbytes: int, *, granularity: int | None = None,
             chunk_limit: int | None = None) -> list[tuple[int, int]]:
    memory = FakeHost(os.environ["KVREG_FAKE_HOST"]).rank(int(os.environ["RANK"]))
    if memory.rank == 0:            # rank 0 fills first: it is the largest when rank 1 fills
        memory.touch(ptr, nbytes)
    dist.barrier()
    if memory.rank == 1:
        memory.touch(ptr, nbytes)
    dist.barrier()
    if int(cudart.cudaHostRegister(ptr, nbytes, 0)):
        raise RuntimeError("cudaHostRegister failed")
    return [(ptr, nbytes)]


def teardown(cudart: Any, ranges: list[tuple[int, int]]) -> None:
    ranges[:] = [(p, s) for p, s in reversed(ranges) if int(cudart.cudaHostUnregister(p))]
