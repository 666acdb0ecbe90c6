"""The ``kvreg_ranks`` fixture, worked through on a region every rank shares.

``shared_region`` below is written the way serving engines share a KV region between the
ranks of one machine (vLLM's ``SharedOffloadRegion`` + ``pin_mmap_region`` do the same
steps: docs/real-code-trials.md §6): the first rank to create ``/dev/shm/<name>`` with
``O_EXCL`` sizes it, the others open it and wait for the size, every rank maps it, a barrier,
the creator unlinks it, each rank populates its own slots with ``MADV_POPULATE_WRITE``,
takes the address with ``torch.frombuffer`` and ``cudaHostRegister``s the whole region. It
runs unmodified on 2-8 rank processes of one fake host, at TiB sizes, without RAM.
"""

from __future__ import annotations

import errno
import mmap
import os
import signal
import time
from typing import Any

import pytest
import torch
import torch.distributed as dist

GiB = 1 << 30
TiB = 1 << 40
NAME = "/dev/shm/kvreg_region_test.mmap"


def shared_region(size: int, slot: int, keep: bool = False) -> dict[str, Any]:
    """One rank's part: create or open, map, unlink after the barrier, populate, pin."""
    rank, world = dist.get_rank(), dist.get_world_size()
    creator = False
    try:
        fd = os.open(NAME, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        os.ftruncate(fd, size)
        creator = True
    except FileExistsError:
        fd = os.open(NAME, os.O_RDWR)
        while os.fstat(fd).st_size < size:
            time.sleep(0.005)
    region = mmap.mmap(fd, size, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    dist.barrier()
    if creator:
        os.unlink(NAME)
    for row in range(size // (slot * world)):
        region.madvise(23, row * slot * world + rank * slot, slot)   # MADV_POPULATE_WRITE
    base = torch.frombuffer(memoryview(region), dtype=torch.int8)
    cudart = torch.cuda.cudart()  # type: ignore[no-untyped-call]
    code = int(cudart.cudaHostRegister(base.data_ptr(), size, 0))
    if code == 0 and not keep:
        cudart.cudaHostUnregister(base.data_ptr())
    return {"creator": creator, "code": code}


_SET_UP: list[bool] = []


def note_setup() -> None:
    """A rank's imports: runs before the fakes answer (torch's CPU build is seen)."""
    _SET_UP.append(torch.cuda.is_available())


def what_the_rank_sees(tag: str) -> dict[str, Any]:
    from kvreg.harness.plugin.rank_side import current

    context = current()
    return {"tag": tag, "rank": dist.get_rank(), "env_rank": os.environ["RANK"],
            "context_rank": context.rank, "cuda": torch.cuda.is_available(),
            "setup_saw_cuda": list(_SET_UP), "psutil_total": _meminfo_total()}


def _meminfo_total() -> int:
    with open("/proc/meminfo") as f:
        return int(f.readline().split()[1]) * 1024


def test_four_ranks_share_and_pin_one_half_tib_region(kvreg_ranks: Any) -> None:
    result = kvreg_ranks.run(shared_region, ranks=4, host={"ram": "2TiB", "shm": "1TiB"},
                             args=(256 * GiB, 64 * GiB, True))
    assert sorted(v["creator"] for v in result.values) == [False, False, False, True]
    assert [v["code"] for v in result.values] == [0, 0, 0, 0]
    assert result.pinned == {r: 256 * GiB for r in range(4)}   # each rank pins all of it
    assert result.shm_files == {}        # unlinked after the barrier: no name left
    assert result.shm_left == {}
    assert result.totals.shm == 0        # the last mapping closed with the last rank


def test_a_stale_file_from_a_crashed_run_is_left_and_joined(kvreg_ranks: Any) -> None:
    def crashed_run(host: Any) -> None:
        dead = host.rank(9)
        dead.shm_create(os.path.basename(NAME))
        dead.shm_ftruncate(os.path.basename(NAME), 64 * GiB)
        dead.exit()                       # SIGKILLed before it unlinked

    result = kvreg_ranks.run(shared_region, ranks=2, host={"ram": "1TiB"},
                             args=(64 * GiB, 16 * GiB), before=crashed_run)
    # every rank took the stale file for a live peer's: nobody created, nobody unlinked
    assert [v["creator"] for v in result.values] == [False, False]
    assert list(result.shm_left) == ["kvreg_region_test.mmap"]
    assert result.shm_left["kvreg_region_test.mmap"]["resident"] == 64 * GiB


def test_a_full_dev_shm_fails_populate_with_efault(kvreg_ranks: Any) -> None:
    result = kvreg_ranks.run(shared_region, ranks=2, host={"ram": "1TiB", "shm": "16GiB"},
                             args=(64 * GiB, 16 * GiB), check=False)
    raised = [o for o in result.outcomes if o.kind == "raised"]
    assert raised and raised[0].exc_type == "OSError"
    assert f"[Errno {errno.EFAULT}]" in raised[0].message
    assert not result.ok and result.pinned == {0: 0, 1: 0}


def test_a_rank_past_the_cgroup_is_oom_killed(kvreg_ranks: Any) -> None:
    result = kvreg_ranks.run(shared_region, ranks=2,
                             host={"ram": "1TiB", "cgroup_memory_max": "40GiB"},
                             args=(64 * GiB, 16 * GiB), check=False, timeout=30)
    kinds = sorted(o.kind for o in result.outcomes)
    assert "killed" in kinds
    assert result.oom_killed and all("out of memory" in why
                                     for why in result.oom_killed.values())
    assert any("OOM killer" in line for line in result.failures())


def test_a_hung_rank_fails_the_test_within_its_timeout(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_hang=f'''
import torch.distributed as dist, time

def hang_on(rank):
    if dist.get_rank() == rank:
        time.sleep(3600)
    dist.barrier()

def test_hang(kvreg_ranks):
    kvreg_ranks.run(hang_on, ranks=2, host={{"ram": "{GiB}"}}, args=(1,), timeout=2)
''')
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=120)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*hang_on on 2 ranks did not return on every rank*",
                                 "rank 0: hung: *timeout of 2 s*", "rank 1: hung: *"])


def test_setup_args_per_rank_and_the_cpu_view(kvreg_ranks: Any) -> None:
    result = kvreg_ranks.run(what_the_rank_sees, ranks=2, host={"ram": "3TiB"},
                             args_per_rank=[("a",), ("b",)], setup=note_setup,
                             cuda_machine=False)
    assert [v["tag"] for v in result.values] == ["a", "b"]
    assert all(v["rank"] == v["context_rank"] == int(v["env_rank"]) for v in result.values)
    assert all(v["setup_saw_cuda"][-1] is False for v in result.values)
    assert all(v["psutil_total"] == 3 * TiB for v in result.values)   # /proc/meminfo: the host
    gpu = kvreg_ranks.run(what_the_rank_sees, ranks=2, host={"ram": "3TiB"}, args=("c",))
    assert all(v["cuda"] is True for v in gpu.values)      # a GPU rank by default


def test_a_lambda_is_refused_with_a_reason(kvreg_ranks: Any) -> None:
    with pytest.raises(ValueError, match="module-level function"):
        kvreg_ranks.run(lambda: None, ranks=1, host={"ram": "1TiB"})


# -- a rank kvreg stopped that the host had OOM-killed ------------------------------------------

def oom_kill_a_peer_then_raise(victim: int, size: int) -> str:
    """Rank ``victim`` faults ``size`` in; then the last rank faults as much in, which the
    host cannot hold: its OOM killer takes ``victim`` (the most resident), and the last rank
    raises. The other ranks wait in a barrier that never completes. The victim's watcher
    (rank_side.py) looks at the host only every ``OOM_POLL_S``, so on a loaded machine kvreg
    may stop the victim, for the last rank's exception, before its watcher has seen the
    kill: the victim's view of the host is blinded here to hold that window open."""
    from kvreg.harness.plugin.rank_side import current

    context = current()
    rank, last = dist.get_rank(), dist.get_world_size() - 1
    base = (rank + 1) * TiB
    if rank == victim:
        context.memory.touch(base, size)
        context.host.__dict__["killed"] = dict     # the watcher never sees its kill
    dist.barrier()
    if rank == last:
        context.memory.touch(base, size)
        raise RuntimeError("the engine gives up")
    dist.barrier()           # never completes: the last rank raised
    return "returned"


def test_a_rank_stopped_after_the_host_oom_killed_it_is_reported_killed(
        kvreg_ranks: Any) -> None:
    """kvreg stopped rank 1 for rank 2's exception, but the host's OOM killer had taken it:
    the fixture reports it killed by SIGKILL, as the kernel's kill would have ended it
    (plugin/ranks.py), while rank 0, which the host never killed, stays stopped."""
    result = kvreg_ranks.run(oom_kill_a_peer_then_raise, ranks=3, host={"ram": "1TiB"},
                             args=(1, 600 * GiB), check=False)
    stopped, victim, raised = result.outcomes
    assert list(result.oom_killed) == [1]
    assert result.oom_killed[1].startswith("out of memory: ")
    assert (victim.kind, victim.signal) == ("killed", signal.SIGKILL)
    assert victim.reason == ("rank 1: the implementation's process was killed by SIGKILL "
                             f"(the fake host's OOM killer: {result.oom_killed[1]})")
    assert (stopped.kind, stopped.cause) == ("stopped", 2)
    assert stopped.reason == "stopped: rank 2 raised RuntimeError"
    assert (raised.kind, raised.exc_type) == ("raised", "RuntimeError")
    lines = result.failures()
    assert lines[1].endswith(f"(the fake host's OOM killer: {result.oom_killed[1]})")
    assert lines[0] == "stopped: rank 2 raised RuntimeError"


def raise_on_the_last_rank() -> None:
    if dist.get_rank() == dist.get_world_size() - 1:
        raise RuntimeError("the engine gives up")
    dist.barrier()           # never completes


def test_a_rank_stopped_by_a_peers_failure_stays_stopped(kvreg_ranks: Any) -> None:
    result = kvreg_ranks.run(raise_on_the_last_rank, ranks=2, host={"ram": "1TiB"},
                             check=False)
    assert result.oom_killed == {}
    assert [o.kind for o in result.outcomes] == ["stopped", "raised"]
    assert result.outcomes[0].reason == "stopped: rank 1 raised RuntimeError"
