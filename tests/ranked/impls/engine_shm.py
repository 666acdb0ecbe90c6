"""An engine's own /dev/shm file beside its pool (vLLM's offload region), reached through
the fake host the ranks share (its state file is in KVREG_FAKE_HOST), generic style:

- BROKEN ``register_kept``: every rank creates its file and nothing ever unlinks it
  (vLLM #51579). Expected rule: shm-leaked;
- CORRECT ``register_unlink_at_teardown``: the same file, unlinked by teardown;
- CORRECT ``register_unlink_once_mapped``: rank 0 creates one file, the ranks map it behind a
  barrier, and rank 0 unlinks it once every rank has it (vLLM PR #52596).
"""

from __future__ import annotations

import os
from typing import Any

import torch.distributed as dist

from kvreg.fakes.host.fake_host import FakeHost


def _memory() -> Any:
    return FakeHost(os.environ["KVREG_FAKE_HOST"]).rank(int(os.environ["RANK"]))


def _pin(cudart: Any, ptr: int, nbytes: int) -> list[tuple[int, int]]:
    if int(cudart.cudaHostRegister(ptr, nbytes, 0)):
        raise RuntimeError("cudaHostRegister failed")
    return [(ptr, nbytes)]


def register_kept(cudart: Any, ptr: int, nbytes: int, *, granularity: int | None = None,
                  chunk_limit: int | None = None) -> list[tuple[int, int]]:
    memory = _memory()
    memory.shm_create(f"engine-{memory.rank}", exclusive=False)
    memory.shm_ftruncate(f"engine-{memory.rank}", 1 << 20)
    return _pin(cudart, ptr, nbytes)


def register_unlink_at_teardown(cudart: Any, ptr: int, nbytes: int, *,
                                granularity: int | None = None,
                                chunk_limit: int | None = None) -> list[tuple[int, int]]:
    return register_kept(cudart, ptr, nbytes)


def register_unlink_once_mapped(cudart: Any, ptr: int, nbytes: int, *,
                                granularity: int | None = None,
                                chunk_limit: int | None = None) -> list[tuple[int, int]]:
    memory = _memory()
    if memory.rank == 0:
        memory.shm_create("engine-shared")
        memory.shm_ftruncate("engine-shared", 1 << 20)
    dist.barrier()
    memory.map_shm("engine-shared", 1 << 46, 1 << 20)
    dist.barrier()
    if memory.rank == 0:
        memory.shm_unlink("engine-shared")
    memory.unmap_shm(1 << 46)
    return _pin(cudart, ptr, nbytes)


def teardown(cudart: Any, ranges: list[tuple[int, int]]) -> None:
    ranges[:] = [(p, s) for p, s in reversed(ranges) if int(cudart.cudaHostUnregister(p))]


def teardown_unlink(cudart: Any, ranges: list[tuple[int, int]]) -> None:
    teardown(cudart, ranges)
    memory = _memory()
    if f"engine-{memory.rank}" in FakeHost(os.environ["KVREG_FAKE_HOST"]).shm_files():
        memory.shm_unlink(f"engine-{memory.rank}")
