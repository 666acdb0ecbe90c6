"""BROKEN (SGLang #38156, PR #35540's ``(available - reserve) // ranks_per_host``): each rank
reads the host's available memory when its turn comes (the ranks register one after
another), after its peers have pinned, and divides it by the rank count: the peers' pools
are counted twice, so later ranks refuse pools the host can hold. Expected rule:
unexpected-error on the later ranks (no call of theirs failed)."""

from __future__ import annotations

from typing import Any

import psutil  # type: ignore[import-untyped]
import torch.distributed as dist


def register(cudart: Any, ptr: int, nbytes: int, *, granularity: int | None = None,
             chunk_limit: int | None = None) -> list[tuple[int, int]]:
    done: list[tuple[int, int]] = []
    error: Exception | None = None
    for turn in range(dist.get_world_size()):          # one rank at a time
        if turn == dist.get_rank():
            budget = psutil.virtual_memory().available // dist.get_world_size()
            if nbytes > budget:
                error = ValueError(f"pool of {nbytes} bytes exceeds this rank's budget "
                                   f"{budget}")
            elif int(cudart.cudaHostRegister(ptr, nbytes, 0)):
                error = RuntimeError("cudaHostRegister failed")
            else:
                done.append((ptr, nbytes))
        dist.barrier()
    if error is not None:
        raise error
    return done


def teardown(cudart: Any, ranges: list[tuple[int, int]]) -> None:
    ranges[:] = [(p, s) for p, s in reversed(ranges) if int(cudart.cudaHostUnregister(p))]
