"""An engine whose rank 0 creates its region as ``/dev/shm/kv_cache_region`` beside its pool
(the name the catalog's ``ranks/stale_shm/tp8-stale-engine-file`` finds left by a crashed
run), through the fake host the ranks share (KVREG_FAKE_HOST), generic style:

- BROKEN ``register_exclusive``: ``open(O_CREAT | O_EXCL)`` of the name, as
  ``SharedMemory(create=True)`` does: on a host where a crashed run left the file it fails
  with EEXIST (``FileExistsError``), and the engine never starts (vllm PR #51317, #54002).
  Expected: unexpected-error on rank 0, naming the FileExistsError;
- CORRECT ``register_clean_first``: removes a stale file of that name first, then creates
  it exclusively; teardown unlinks it (vllm #57303, PR #52596).
"""

from __future__ import annotations

import os
from contextlib import suppress
from typing import Any

from chunked_pins import pin_chunks, unpin_all
from chunked_pins import teardown as unpin_teardown

from kvreg.fakes.host.fake_host import FakeHost

__all__ = ["register_clean_first", "register_exclusive", "teardown"]

NAME = "kv_cache_region"


def _memory() -> Any:
    return FakeHost(os.environ["KVREG_FAKE_HOST"]).rank(int(os.environ["RANK"]))


def _pin(cudart: Any, ptr: int, nbytes: int, granularity: int | None,
         chunk_limit: int) -> list[tuple[int, int]]:
    done, rc = pin_chunks(cudart, ptr, nbytes, granularity, chunk_limit)
    if rc:
        unpin_all(cudart, done)
        raise RuntimeError(f"cudaHostRegister failed with {rc}")
    return done


def register_exclusive(cudart: Any, ptr: int, nbytes: int, *, granularity: int | None,
                       chunk_limit: int) -> list[tuple[int, int]]:
    memory = _memory()
    if memory.rank == 0:
        memory.shm_create(NAME, exclusive=True)     # FileExistsError where it was left
        memory.shm_ftruncate(NAME, 1 << 30)
    return _pin(cudart, ptr, nbytes, granularity, chunk_limit)


def register_clean_first(cudart: Any, ptr: int, nbytes: int, *, granularity: int | None,
                         chunk_limit: int) -> list[tuple[int, int]]:
    memory = _memory()
    if memory.rank == 0:
        with suppress(FileNotFoundError):
            memory.shm_unlink(NAME)                 # what a crashed run left
        memory.shm_create(NAME, exclusive=True)
        memory.shm_ftruncate(NAME, 1 << 30)
    return _pin(cudart, ptr, nbytes, granularity, chunk_limit)


def teardown(cudart: Any, ranges: list[tuple[int, int]]) -> None:
    unpin_teardown(cudart, ranges)
    memory = _memory()
    if memory.rank == 0 and NAME in memory.host.shm_files():
        memory.shm_unlink(NAME)


teardown.repeatable = True  # type: ignore[attr-defined]
