"""The fake host's accounting: /dev/shm, RAM, cgroup, RLIMIT_MEMLOCK, pins, /proc/meminfo.

Each behaviour cites its row of docs/host.md; the sizes are TiB where it matters, and nothing
is allocated (the host only counts).
"""

from __future__ import annotations

import errno
import importlib
import io
import itertools
import os
import pathlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvreg.fakes.host import pages as P
from kvreg.fakes.host.fake_host import FakeHost, OomKilled, RankMemory, SigBus
from kvreg.fakes.host.limits import HostLimits
from kvreg.fakes.host.meminfo import meminfo_fields, meminfo_text, patch_host_files

GiB = 1 << 30
TiB = 1 << 40
PAGE = 4096
SHM_BASE = 0x7000_0000_0000     # where each rank maps the shared file (any address works)


def _host(tmp_path: Path, **limits: object) -> FakeHost:
    return FakeHost.create(tmp_path / "host.json", HostLimits(**limits))


# -- page ranges ---------------------------------------------------------------------------------

spans = st.lists(st.tuples(st.integers(0, 200), st.integers(0, 40), st.booleans()),
                 max_size=30)


@given(spans)
def test_page_ranges_match_a_set_of_pages(ops: list[tuple[int, int, bool]]) -> None:
    ranges: P.Ranges = []
    model: set[int] = set()
    for lo, n, adding in ops:
        span = set(range(lo, lo + n))
        if adding:
            ranges, changed = P.add(ranges, lo, lo + n)
            assert changed == len(span - model)
            model |= span
        else:
            ranges, changed = P.remove(ranges, lo, lo + n)
            assert changed == len(span & model)
            model -= span
        assert P.count(ranges) == len(model)
        assert all(a < b for a, b in ranges)
        assert all(b < c for (_, b), (c, _) in itertools.pairwise(ranges))


@given(st.lists(st.lists(st.tuples(st.integers(0, 100), st.integers(1, 20)), max_size=5),
                max_size=4))
def test_union_count_is_the_union(many: list[list[tuple[int, int]]]) -> None:
    lists = []
    pages: set[int] = set()
    for spans_ in many:
        r: P.Ranges = []
        for lo, n in spans_:
            r, _ = P.add(r, lo, lo + n)
            pages |= set(range(lo, lo + n))
        lists.append(r)
    assert P.union_count(lists) == len(pages)


def test_page_span_covers_every_touched_page() -> None:
    assert P.page_span(0, 1) == (0, 1)
    assert P.page_span(PAGE - 1, 2) == (0, 2)
    assert P.page_span(PAGE, PAGE) == (1, 2)


# -- limits ----------------------------------------------------------------------------------------

def test_limits_refuse_what_no_host_has() -> None:
    with pytest.raises(ValueError, match="ram"):
        HostLimits(ram=0)
    with pytest.raises(ValueError, match="pin_exhausted_code"):
        HostLimits(ram=GiB, pin_exhausted_code=700)
    with pytest.raises(ValueError, match="exceed"):
        HostLimits(ram=GiB, other_used=GiB, page_cache=1)
    assert HostLimits(ram=2 * TiB).shm_size == TiB        # tmpfs default: half of RAM


def test_a_host_opens_by_path_only_if_it_exists(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        FakeHost(tmp_path / "none.json")
    _host(tmp_path, ram=TiB)
    assert FakeHost(tmp_path / "host.json").limits.ram == TiB


# -- /dev/shm (docs/host.md §2) --------------------------------------------------------------------

def test_ftruncate_is_sparse_and_succeeds_past_the_tmpfs_size(tmp_path: Path) -> None:
    host = _host(tmp_path, ram=4 * TiB, shm=TiB)
    r0 = host.rank(0)
    r0.shm_create("region")
    r0.shm_ftruncate("region", 3 * TiB)      # vLLM PR #47073: ftruncate reserves nothing
    assert host.shm_files()["region"] == {"size": 3 * TiB, "resident": 0, "mapped_by": []}
    assert host.totals().shm == 0


def test_populate_past_the_tmpfs_size_is_efault_and_keeps_what_fit(tmp_path: Path) -> None:
    host = _host(tmp_path, ram=4 * TiB, shm=TiB)
    r0 = host.rank(0)
    r0.shm_create("region")
    r0.shm_ftruncate("region", 2 * TiB)
    r0.map_shm("region", SHM_BASE, 2 * TiB)
    r0.populate(SHM_BASE, TiB // 2)
    with pytest.raises(OSError) as err:       # vLLM #54002: [Errno 14] Bad address
        r0.populate(SHM_BASE + TiB // 2, TiB)
    assert err.value.errno == errno.EFAULT
    assert host.totals().shm == TiB           # the pages before the failing one stay
    r0.populate(SHM_BASE + TiB // 2, TiB // 2)   # all resident already: nothing to fail
    assert host.totals().shm == TiB
    with pytest.raises(SigBus):               # a plain write past what tmpfs holds
        r0.touch(SHM_BASE + TiB, PAGE)


def test_touch_past_the_end_of_the_file_is_sigbus(tmp_path: Path) -> None:
    host = _host(tmp_path, ram=TiB)
    r0 = host.rank(0)
    r0.shm_create("f")
    r0.shm_ftruncate("f", GiB)
    r0.map_shm("f", SHM_BASE, 2 * GiB)
    with pytest.raises(SigBus):                # the pages before the end fault in first
        r0.touch(SHM_BASE + GiB // 2, GiB)
    assert host.totals().shm == GiB // 2
    r0.touch(SHM_BASE, GiB)
    with pytest.raises(SigBus):
        r0.touch(SHM_BASE + GiB, 1)
    with pytest.raises(OSError) as err:
        r0.populate(SHM_BASE + GiB, 1)
    assert err.value.errno == errno.EFAULT


def test_fallocate_past_the_tmpfs_size_is_enospc_and_allocates_nothing(tmp_path: Path) -> None:
    host = _host(tmp_path, ram=4 * TiB, shm=TiB)
    r0 = host.rank(0)
    r0.shm_create("f")
    with pytest.raises(OSError) as err:
        r0.shm_fallocate("f", 0, TiB + PAGE)
    assert err.value.errno == errno.ENOSPC
    assert host.totals().shm == 0 and host.shm_files()["f"]["size"] == 0
    r0.shm_fallocate("f", 0, TiB)
    assert host.shm_files()["f"] == {"size": TiB, "resident": TiB, "mapped_by": []}


def test_a_shared_region_is_charged_once_however_many_ranks_touch_it(tmp_path: Path) -> None:
    host = _host(tmp_path, ram=8 * TiB, shm=4 * TiB)
    ranks = [host.rank(r) for r in range(8)]
    ranks[0].shm_create("kv")
    ranks[0].shm_ftruncate("kv", 2 * TiB)
    for r in ranks:
        r.map_shm("kv", SHM_BASE + r.rank * 4 * TiB, 2 * TiB)
        r.touch(SHM_BASE + r.rank * 4 * TiB, 2 * TiB)
    t = host.totals()
    assert t.shm == 2 * TiB and t.anon == 0
    assert host.shm_files()["kv"]["mapped_by"] == list(range(8))


def test_a_file_left_by_a_dead_rank_stays_charged_for_the_next_run(tmp_path: Path) -> None:
    host = _host(tmp_path, ram=4 * TiB, shm=TiB)
    first = host.rank(0)
    first.shm_create("vllm_offload_x.mmap")
    first.shm_ftruncate("vllm_offload_x.mmap", 768 * GiB)
    first.map_shm("vllm_offload_x.mmap", SHM_BASE, 768 * GiB)
    first.populate(SHM_BASE, 768 * GiB)
    first.exit()                                   # SIGKILL: no cleanup ran
    again = FakeHost(tmp_path / "host.json").rank(0)   # the restarted engine
    assert again.host.shm_files()["vllm_offload_x.mmap"]["resident"] == 768 * GiB
    with pytest.raises(FileExistsError):           # O_CREAT | O_EXCL on the same name
        again.shm_create("vllm_offload_x.mmap")
    again.shm_create("vllm_offload_y.mmap")       # a fresh name: ftruncate passes ...
    again.shm_ftruncate("vllm_offload_y.mmap", 768 * GiB)
    again.map_shm("vllm_offload_y.mmap", SHM_BASE, 768 * GiB)
    with pytest.raises(OSError) as err:            # ... and madvise fails (vLLM #54002)
        again.populate(SHM_BASE, 768 * GiB)
    assert err.value.errno == errno.EFAULT


def test_an_unlinked_file_is_freed_when_its_last_mapper_goes(tmp_path: Path) -> None:
    host = _host(tmp_path, ram=TiB)
    a, b = host.rank(0), host.rank(1)
    a.shm_create("f")
    a.shm_ftruncate("f", GiB)
    for r in (a, b):
        r.map_shm("f", SHM_BASE, GiB)
    a.populate(SHM_BASE, GiB)
    a.shm_unlink("f")                  # vLLM PR #52596: unlink once every rank mapped it
    assert "f" not in host.shm_files() and host.totals().shm == GiB
    a.exit()
    assert host.totals().shm == GiB    # b still maps it
    b.exit()
    assert host.totals().shm == 0


# -- RAM, cgroup and the OOM killer (docs/host.md §1) ---------------------------------------------

def test_touching_past_the_cgroup_kills_the_largest_rank(tmp_path: Path) -> None:
    host = _host(tmp_path, ram=8 * TiB, cgroup_memory_max=3 * TiB)
    big, small = host.rank(0), host.rank(1)
    big.touch(0x1000_0000_0000, 2 * TiB)
    small.touch(0x1000_0000_0000, TiB // 2)
    small.touch(0x2000_0000_0000, TiB // 2)    # 3 TiB in all: fits exactly
    assert host.totals().cgroup_usage == 3 * TiB
    small.touch(0x3000_0000_0000, GiB)         # one GiB more: the largest rank dies
    assert host.killed() == {0: f"out of memory: {GiB} bytes more did not fit"}
    assert host.totals().anon == TiB + GiB
    with pytest.raises(OomKilled):
        big.touch(0x1000_0000_0000, PAGE)


def test_the_rank_that_asks_is_killed_when_it_is_the_largest(tmp_path: Path) -> None:
    host = _host(tmp_path, ram=TiB)
    a, b = host.rank(0), host.rank(1)
    b.touch(0, GiB)
    a.touch(0, TiB - 2 * GiB)
    with pytest.raises(OomKilled) as err:
        a.touch(1 << 45, 2 * GiB)
    assert err.value.rank == 0
    assert host.killed() == {0: err.value.reason}
    assert host.totals().anon == GiB
    assert host.events() == [{"kind": "oom-kill", "rank": 0, "reason": err.value.reason}]


def test_reclaimable_cache_makes_room_before_anything_dies(tmp_path: Path) -> None:
    host = _host(tmp_path, ram=TiB, page_cache=TiB // 2)
    r = host.rank(0)
    r.touch(0, TiB * 3 // 4)
    t = host.totals()
    assert host.killed() == {} and t.page_cache == TiB // 4 and t.free == 0


# -- mlock and RLIMIT_MEMLOCK (docs/host.md §3) ---------------------------------------------------

@pytest.mark.parametrize(("memlock", "cap", "size", "expected"), [
    (0, False, PAGE, errno.EPERM),
    (64 * 1024, False, 64 * 1024 + 1, errno.ENOMEM),
    (64 * 1024, False, 64 * 1024, 0),
    (0, True, GiB, 0),
    (None, False, GiB, 0),
])
def test_mlock_obeys_rlimit_memlock(tmp_path: Path, memlock: int | None, cap: bool,
                                    size: int, expected: int) -> None:
    host = _host(tmp_path, ram=TiB, memlock=memlock, cap_ipc_lock=cap)
    r = host.rank(0)
    if expected:
        with pytest.raises(OSError) as err:
            r.mlock(0x10_0000, size)
        assert err.value.errno == expected
        assert host.totals().mlocked == 0
    else:
        r.mlock(0x10_0000, size)
        assert host.totals().mlocked == -(-size // PAGE) * PAGE
        assert meminfo_fields(host.totals())["Mlocked"] == host.totals().mlocked


def test_pins_ignore_rlimit_memlock_unless_the_option_says_so(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    free = _host(tmp_path / "a", ram=TiB, memlock=64 * 1024)
    assert free.rank(0).pin(0x10_0000, GiB) == 0
    counted = _host(tmp_path / "b", ram=TiB, memlock=64 * 1024, pins_count_memlock=True)
    assert counted.rank(0).pin(0x10_0000, GiB) == 1


# -- pins (docs/host.md §5) -----------------------------------------------------------------------

@pytest.mark.parametrize("code", [1, 2])
def test_a_pin_past_the_pinnable_memory_returns_the_profile_code(tmp_path: Path,
                                                                  code: int) -> None:
    host = _host(tmp_path, ram=4 * TiB, movable=TiB, pin_exhausted_code=code)
    ranks = [host.rank(r) for r in range(4)]
    assert [r.pin(0x1000_0000_0000, TiB) for r in ranks[:3]] == [0, 0, 0]
    assert ranks[3].pin(0x1000_0000_0000, PAGE) == code   # 3 TiB pinnable, all held
    t = host.totals()
    assert t.pinned == 3 * TiB and t.anon == 3 * TiB
    assert ranks[3].live_pins() == {}
    ranks[0].unpin(0x1000_0000_0000)
    assert ranks[3].pin(0x1000_0000_0000, TiB) == 0
    assert host.totals().anon == 4 * TiB       # unpinning keeps the pages resident


def test_pins_of_shared_pages_are_counted_once_and_kept_while_one_rank_holds_them(
        tmp_path: Path) -> None:
    host = _host(tmp_path, ram=4 * TiB, shm=2 * TiB)
    ranks = [host.rank(r) for r in range(4)]
    ranks[0].shm_create("kv")
    ranks[0].shm_ftruncate("kv", TiB)
    for r in ranks:
        r.map_shm("kv", SHM_BASE, TiB)
        # chunked registration: 16 chunks of 64 GiB each (vLLM PR #51081)
        assert [r.pin(SHM_BASE + i * 64 * GiB, 64 * GiB) for i in range(16)] == [0] * 16
    t = host.totals()
    assert t.pinned == TiB and t.shm == TiB and t.anon == 0
    for r in ranks[:3]:
        for i in range(16):
            r.unpin(SHM_BASE + i * 64 * GiB)
    assert host.totals().pinned == TiB and host.rank_pinned(3) == TiB
    assert host.rank_pinned(0) == 0


def test_a_shared_pin_tmpfs_cannot_back_fails_with_1(tmp_path: Path) -> None:
    host = _host(tmp_path, ram=4 * TiB, shm=TiB)
    r = host.rank(0)
    r.shm_create("kv")
    r.shm_ftruncate("kv", 2 * TiB)
    r.map_shm("kv", SHM_BASE, 2 * TiB)
    assert r.pin(SHM_BASE, 2 * TiB) == 1
    assert host.totals().shm == 0 and host.totals().pinned == 0


def test_adjacent_pins_sharing_a_page_count_it_once_until_both_go(tmp_path: Path) -> None:
    host = _host(tmp_path, ram=TiB)
    r = host.rank(0)
    assert r.pin(0x10_0000, 100) == 0
    assert r.pin(0x10_0000 + 100, 100) == 0         # byte-disjoint, same page
    assert host.totals().pinned == PAGE
    r.unpin(0x10_0000)
    assert host.totals().pinned == PAGE
    r.unpin(0x10_0000 + 100)
    assert host.totals().pinned == 0
    with pytest.raises(ValueError, match="no live pin"):
        r.unpin(0x10_0000)


def test_concurrent_pins_of_the_same_shared_pages_fail_only_when_armed(tmp_path: Path) -> None:
    for armed in (False, True):
        path = tmp_path / str(armed)
        path.mkdir()
        host = _host(path, ram=4 * TiB, concurrent_shared_pin_fails=armed)
        a, b, c = host.rank(0), host.rank(1), host.rank(2)
        a.shm_create("kv")
        a.shm_ftruncate("kv", GiB)
        for r in (a, b, c):
            r.map_shm("kv", SHM_BASE, GiB)
        ta, tb = a.begin_pin(SHM_BASE, GiB), b.begin_pin(SHM_BASE, GiB)   # overlapping
        expected = 1 if armed else 0
        assert (a.finish_pin(ta), b.finish_pin(tb)) == (expected, expected)
        assert c.pin(SHM_BASE, GiB) == 0        # alone (serialized by a file lock): fine
        assert host.totals().pinned == GiB


def test_a_private_pin_is_never_concurrent(tmp_path: Path) -> None:
    host = _host(tmp_path, ram=TiB, concurrent_shared_pin_fails=True)
    a, b = host.rank(0), host.rank(1)
    ta, tb = a.begin_pin(0x10_0000, GiB), b.begin_pin(0x10_0000, GiB)
    assert (a.finish_pin(ta), b.finish_pin(tb)) == (0, 0)
    assert host.totals().pinned == 2 * GiB


# -- /proc/meminfo, the cgroup files and psutil (docs/host.md §4) ---------------------------------

def _field(text: str, name: str) -> int:
    line = next(x for x in text.splitlines() if x.startswith(f"{name}:"))
    return int(line.split()[1]) * 1024


def test_meminfo_falls_as_ranks_fault_their_pages_in(tmp_path: Path) -> None:
    host = _host(tmp_path, ram=2 * TiB, other_used=64 * GiB, cgroup_memory_max=TiB)
    reads = []
    with patch_host_files(host):
        for r in range(3):
            host.rank(r).touch(0x10_0000, 100 * GiB)
            with open("/proc/meminfo") as fh:
                reads.append(_field(fh.read(), "MemAvailable"))
        current = pathlib.Path("/sys/fs/cgroup/memory.current").read_text()
        with io.open("/sys/fs/cgroup/memory.max", "rb") as fh:   # noqa: UP020
            limit = fh.read()
    assert reads == [2 * TiB - 64 * GiB - k * 100 * GiB for k in (1, 2, 3)]
    assert current == f"{300 * GiB}\n" and limit == f"{TiB}\n".encode()
    with open("/proc/meminfo") as fh:          # the patch is gone: the real file again
        assert _field(fh.read(), "MemTotal") != 2 * TiB


def test_shmem_is_cached_but_not_available(tmp_path: Path) -> None:
    host = _host(tmp_path, ram=TiB, page_cache=100 * GiB, wmark_low=GiB)
    r = host.rank(0)
    r.shm_create("f")
    r.shm_ftruncate("f", 200 * GiB)
    r.shm_fallocate("f", 0, 200 * GiB)
    text = meminfo_text(host.totals())
    assert _field(text, "Shmem") == 200 * GiB
    assert _field(text, "Cached") == 300 * GiB
    assert _field(text, "MemFree") == TiB - 300 * GiB
    # si_mem_available: free + file cache less min(cache / 2, wmark_low); shmem is not cache
    assert _field(text, "MemAvailable") == TiB - 300 * GiB + 100 * GiB - GiB
    assert _field(text, "Mlocked") == 0


def test_pins_show_in_no_meminfo_field_but_their_pages_do(tmp_path: Path) -> None:
    host = _host(tmp_path, ram=TiB)
    before = meminfo_fields(host.totals())
    assert host.rank(0).pin(0x10_0000, GiB) == 0
    after = meminfo_fields(host.totals())
    changed = {k for k in before if before[k] != after[k]}
    assert changed == {"MemFree", "MemAvailable", "AnonPages", "Active", "Active(anon)"}
    assert after["Mlocked"] == 0


def test_psutil_reads_the_fake_host(tmp_path: Path) -> None:
    psutil = importlib.import_module("psutil")      # a test dependency (pyproject [test])

    host = _host(tmp_path, ram=2 * TiB, page_cache=10 * GiB)
    with patch_host_files(host):
        first = psutil.virtual_memory()
        host.rank(0).touch(0x10_0000, 500 * GiB)
        second = psutil.virtual_memory()
    assert first.total == second.total == 2 * TiB
    assert first.available - second.available == 500 * GiB
    assert second.used == second.total - second.available      # psutil >= 6: total - avail
    assert psutil.virtual_memory().total != 2 * TiB


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 64)), max_size=12))
def test_meminfo_adds_up(tmp_path_factory: pytest.TempPathFactory,
                         touches: list[tuple[int, int]]) -> None:
    host = _host(tmp_path_factory.mktemp("h"), ram=TiB, page_cache=GiB, other_used=GiB)
    ranks: dict[int, RankMemory] = {}
    for rank, gib in touches:
        ranks.setdefault(rank, host.rank(rank)).touch(gib * GiB, GiB)
    f = meminfo_fields(host.totals())
    assert f["MemFree"] + f["AnonPages"] + f["Cached"] == f["MemTotal"]
    assert f["MemAvailable"] == f["MemFree"] + f["Inactive(file)"]


# -- the shared state file -------------------------------------------------------------------------

def test_a_write_cut_short_leaves_the_previous_state(tmp_path: Path) -> None:
    """A rank killed in the middle of writing the state: the slot it was writing fails its
    checksum and the reader takes the other, one change older."""
    host = _host(tmp_path, ram=TiB)
    r = host.rank(0)
    r.touch(0, GiB)
    r.touch(2 * GiB, GiB)
    slots = host.state.slots
    newest = max(slots, key=lambda p: int(p.read_bytes().split()[0]))
    data = newest.read_bytes()
    newest.write_bytes(data[: len(data) // 2])     # the second touch's write, cut short
    assert host.totals().anon == GiB
    r.touch(4 * GiB, GiB)                            # and the next change goes on from it
    assert FakeHost(tmp_path / "host.json").totals().anon == 2 * GiB
    for slot in slots:
        slot.write_bytes(b"garbage\n")
    with pytest.raises(RuntimeError, match="unreadable"):
        host.totals()


def test_threads_and_processes_sharing_one_state_take_turns(tmp_path: Path) -> None:
    """A process keeps one descriptor of the lock file, and a flock belongs to the open file
    description: its threads (a rank's OOM watcher beside its code) must still exclude each
    other, and so must a forked child, which gets descriptors of its own."""
    import multiprocessing
    import threading

    state = FakeHost.create(tmp_path / "host.json", HostLimits(ram=TiB)).state

    def bump(times: int) -> None:
        for _ in range(times):
            with state.change() as st:
                count = st.get("count", 0)
                os.sched_yield()              # invite the other side into the transaction
                st["count"] = count + 1

    state.read()                              # the parent opened its descriptors
    child = multiprocessing.get_context("fork").Process(target=bump, args=(200,))
    child.start()
    threads = [threading.Thread(target=bump, args=(200,)) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    child.join(60)
    assert child.exitcode == 0
    assert state.read()["count"] == 800
    with state.batch():                       # a batch is its own thread's
        with state.change() as st:
            st["count"] += 1
        seen: list[int] = []
        reader = threading.Thread(target=lambda: seen.append(state.read()["count"]))
        reader.start()
        reader.join(0.2)
        assert reader.is_alive() and not seen  # it waits for the batch to end
    reader.join(10)
    assert seen == [801] and state.read()["count"] == 801
