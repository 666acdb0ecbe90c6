"""Code that uses /dev/shm through os, open and mmap, run unmodified on a fake host.

The calls are the ones serving engines make for a region every rank maps (vLLM's
SharedOffloadRegion: ``os.open(O_CREAT | O_EXCL)``, ``os.ftruncate``, ``mmap.mmap(MAP_SHARED)``,
``madvise(MADV_POPULATE_WRITE)``, ``torch.frombuffer``, ``cudaHostRegister``, ``os.unlink``),
at TiB sizes and without RAM; each error is the one docs/host.md §2 cites.
"""

from __future__ import annotations

import builtins
import ctypes
import errno
import mmap
import os
import resource
from multiprocessing import shared_memory
from pathlib import Path

import pytest
import torch

from kvreg.fakes.cuda.fake_cuda import FakeCuda
from kvreg.fakes.cuda.host_pins import attach_host
from kvreg.fakes.host.fake_host import FakeHost, RankMemory
from kvreg.fakes.host.limits import HostLimits
from kvreg.fakes.host.shm_files import MADV_POPULATE_WRITE, ShmNotModelled, patch_shm
from kvreg.fakes.not_modelled import reached

GiB = 1 << 30
TiB = 1 << 40
PATH = "/dev/shm/vllm_offload_t.mmap"
RW = mmap.PROT_READ | mmap.PROT_WRITE


def _host(tmp_path: Path, **limits: object) -> FakeHost:
    return FakeHost.create(tmp_path / "host.json", HostLimits(**limits))


def _create(size: int) -> int:
    fd = os.open(PATH, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    os.ftruncate(fd, size)
    return fd


def test_a_tib_region_is_created_sized_listed_and_unlinked_without_ram(tmp_path: Path) -> None:
    host = _host(tmp_path, ram=4 * TiB, shm=2 * TiB)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with patch_shm(host.rank(0)):
        fd = _create(TiB)
        assert os.path.exists(PATH) and os.stat(PATH).st_size == TiB
        assert os.fstat(fd).st_size == TiB
        assert "vllm_offload_t.mmap" in os.listdir("/dev/shm")
        region = mmap.mmap(fd, TiB, flags=mmap.MAP_SHARED, prot=RW)
        region.madvise(MADV_POPULATE_WRITE, 0, 3 * GiB)
        assert host.totals().shm == 3 * GiB          # faulted on the host, not in RAM
        os.unlink(PATH)
        assert not os.path.exists(PATH)
        assert host.totals().shm == 3 * GiB          # mapped: the pages stay until unmapped
        region.close()
        os.close(fd)
    assert host.totals().shm == 0 and host.shm_files() == {}
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before < 200 * 1024
    assert not os.path.exists(PATH)                  # the real /dev/shm never saw it


def test_o_excl_on_an_existing_file_is_eexist_and_a_stale_file_from_a_crash_counts(
        tmp_path: Path) -> None:
    host = _host(tmp_path, ram=TiB, shm=TiB)
    crashed = host.rank(7)               # docs/host.md §2: a file never unlinked outlives it
    crashed.shm_create("vllm_offload_t.mmap")
    crashed.shm_ftruncate("vllm_offload_t.mmap", 512 * GiB)
    crashed.shm_fallocate("vllm_offload_t.mmap", 0, 512 * GiB)
    crashed.exit()
    with patch_shm(host.rank(0)):
        with pytest.raises(FileExistsError) as caught:
            _create(64 * GiB)
        assert caught.value.errno == errno.EEXIST and caught.value.filename == PATH
        assert os.stat(PATH).st_size == 512 * GiB    # opened by name, as a peer would
        fd = os.open("/dev/shm/vllm_offload_u.mmap", os.O_CREAT | os.O_EXCL | os.O_RDWR)
        with pytest.raises(OSError) as full:          # the stale file holds the space
            os.posix_fallocate(fd, 0, 600 * GiB)
        assert full.value.errno == errno.ENOSPC and full.value.filename is None
        os.close(fd)


def test_populate_past_tmpfs_is_efault_and_keeps_what_fit(tmp_path: Path) -> None:
    host = _host(tmp_path, ram=4 * TiB, shm=GiB)
    with patch_shm(host.rank(0)):
        fd = _create(4 * GiB)                          # ftruncate succeeds past the space
        region = mmap.mmap(fd, 4 * GiB, flags=mmap.MAP_SHARED, prot=RW)
        with pytest.raises(OSError) as caught:
            region.madvise(MADV_POPULATE_WRITE)
        assert caught.value.errno == errno.EFAULT and caught.value.filename is None
        assert host.totals().shm == GiB
        with pytest.raises(OSError) as unaligned:
            region.madvise(MADV_POPULATE_WRITE, 100, 4096)
        assert unaligned.value.errno == errno.EINVAL
        region.close()
        os.close(fd)
        os.unlink(PATH)


def test_cuda_host_register_of_the_mapping_pins_the_hosts_shared_pages(tmp_path: Path) -> None:
    host = _host(tmp_path, ram=TiB, shm=TiB)
    ranks = [host.rank(0), host.rank(1)]
    fakes = [FakeCuda(), FakeCuda()]
    for fake, memory in zip(fakes, ranks, strict=True):
        attach_host(fake, memory)
    views, maps, fds = [], [], []
    for fake, memory in zip(fakes, ranks, strict=True):
        with fake.patch(), patch_shm(memory, tmp_path / "files"):
            fd = (_create(256 * GiB) if memory.rank == 0
                  else os.open(PATH, os.O_RDWR))
            region = mmap.mmap(fd, 256 * GiB, flags=mmap.MAP_SHARED, prot=RW)
            base = torch.frombuffer(memoryview(region), dtype=torch.int8)
            cudart = torch.cuda.cudart()  # type: ignore[no-untyped-call]
            code = cudart.cudaHostRegister(base.data_ptr(), 256 * GiB, 0)
            assert int(code) == 0
            views.append(base)
            maps.append(region)
            fds.append(fd)
    views[0][:4] = torch.tensor([1, 2, 3, 4], dtype=torch.int8)
    assert views[1][:4].tolist() == [1, 2, 3, 4]      # one file: the ranks share its bytes
    assert host.totals().pinned == 256 * GiB          # one set of pages, pinned by both
    assert host.rank_pinned(0) == host.rank_pinned(1) == 256 * GiB
    assert host.totals().shm == 256 * GiB
    for fake, memory, base in zip(fakes, ranks, views, strict=True):
        with fake.patch(), patch_shm(memory, tmp_path / "files"):
            cudart = torch.cuda.cudart()  # type: ignore[no-untyped-call]
            assert int(cudart.cudaHostUnregister(base.data_ptr())) == 0
    assert host.totals().pinned == 0
    del views, base
    with patch_shm(ranks[0], tmp_path / "files"):
        for region, fd in zip(maps, fds, strict=True):
            region.close()
            os.close(fd)
        os.unlink(PATH)
    assert host.shm_files() == {} and host.totals().shm == 0


def test_other_paths_and_anonymous_maps_stay_real(tmp_path: Path) -> None:
    host = _host(tmp_path, ram=TiB)
    real = tmp_path / "plain.bin"
    with patch_shm(host.rank(0)):
        fd = os.open(real, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        os.ftruncate(fd, 8192)
        os.posix_fallocate(fd, 0, 8192)
        plain = mmap.mmap(fd, 8192)
        plain[:3] = b"abc"
        plain.madvise(mmap.MADV_DONTNEED, 0, 4096)
        plain.close()
        os.close(fd)
        anon = mmap.mmap(-1, 4096)
        anon.close()
        with open(real, "rb") as f:
            assert f.read(3) == b"abc"
        os.unlink(real)
    assert host.shm_files() == {} and host.totals().shm == 0
    assert os.open is not None and mmap.mmap.__name__ == "mmap"   # restored


def test_open_and_shared_memory_reach_the_host(tmp_path: Path) -> None:
    host = _host(tmp_path, ram=TiB)
    with patch_shm(host.rank(0)):
        with open("/dev/shm/meta.json", "x") as f:
            f.write("{}")
        assert "meta.json" in os.listdir("/dev/shm")
        with pytest.raises(FileExistsError), builtins.open("/dev/shm/meta.json", "x"):
            pass
        block = shared_memory.SharedMemory(name="kvreg_t", create=True, size=GiB)
        assert host.shm_files()["kvreg_t"]["size"] == GiB
        block.close()
        block.unlink()
        os.remove("/dev/shm/meta.json")
    assert host.shm_files() == {}


@pytest.mark.parametrize("call", [
    lambda: os.open("/dev/shm/dir/x", os.O_CREAT | os.O_RDWR),
    lambda: os.rename("/dev/shm/a", "/dev/shm/b"),
    lambda: os.scandir("/dev/shm"),
    lambda: mmap.mmap(os.open(PATH, os.O_CREAT | os.O_RDWR), 4096, prot=mmap.PROT_READ),
    lambda: mmap.mmap(os.open(PATH, os.O_CREAT | os.O_RDWR), 4096,
                      flags=mmap.MAP_PRIVATE),
], ids=["sub-folder", "rename", "scandir", "read-only-map", "private-map"])
def test_what_is_not_modelled_is_loud(tmp_path: Path, call: object) -> None:
    host = _host(tmp_path, ram=TiB)
    with patch_shm(host.rank(0)), reached() as seen, pytest.raises(ShmNotModelled):
        call()  # type: ignore[operator]
    assert seen and "not modelled" in seen[0].message


def test_a_tib_read_into_bytes_is_loud(tmp_path: Path) -> None:
    host = _host(tmp_path, ram=4 * TiB, shm=2 * TiB)
    with patch_shm(host.rank(0)):
        fd = _create(TiB)
        region = mmap.mmap(fd, TiB)
        with pytest.raises(ShmNotModelled, match="real RAM"):
            region.read()
        assert region.read(4) == b"\0" * 4
        region.close()
        os.close(fd)
        os.unlink(PATH)


def test_a_reused_descriptor_number_is_not_taken_for_the_shm_file(tmp_path: Path) -> None:
    host = _host(tmp_path, ram=TiB)
    with patch_shm(host.rank(0)):
        with open("/dev/shm/meta", "w") as f:     # closed by io, not os.close
            number = f.fileno()
        fd = os.open(tmp_path / "other", os.O_CREAT | os.O_RDWR)
        assert fd == number
        os.ftruncate(fd, 1 << 20)                  # the real file, not the host's
        assert host.shm_files()["meta"]["size"] == 0
        os.close(fd)


def test_oom_kill_option_and_bad_option(tmp_path: Path) -> None:
    host = _host(tmp_path, ram=TiB)
    with pytest.raises(ValueError, match="on_oom"), patch_shm(host.rank(0), on_oom="die"):
        pass
    memory: RankMemory = host.rank(0)
    with patch_shm(memory) as files:
        assert files.on_oom == "raise" and files.backing == Path(f"{host.state.path}.shm")
    assert ctypes.sizeof(ctypes.c_void_p) == 8


def test_pinned_pages_of_an_unlinked_file_outlive_its_munmap_until_unregistered(
        tmp_path: Path) -> None:
    """pin_user_pages.rst: a pin holds its pages; an unlinked file whose last mapping
    closed keeps the pinned pages until the pin goes (docs/host.md §2, §5)."""
    host = _host(tmp_path, ram=TiB, shm=TiB)
    memory = host.rank(0)
    with patch_shm(memory):
        fd = _create(4 * GiB)
        region = mmap.mmap(fd, 4 * GiB)
        addr = ctypes.addressof(ctypes.c_char.from_buffer(region))
        assert memory.pin(addr, 4 * GiB) == 0
        os.unlink(PATH)
        region.close()
        os.close(fd)
    assert host.totals().pinned == 4 * GiB and host.totals().shm == 4 * GiB
    memory.unpin(addr)
    assert host.totals().pinned == 0 and host.totals().shm == 0


def _libc_map(addr: int, length: int, fd: int) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.mmap.restype = ctypes.c_void_p
    got = libc.mmap(addr, length, RW, mmap.MAP_SHARED | 0x10, fd, 0)   # MAP_FIXED
    return int(got or 0)


def test_segments_mapped_by_libc_over_a_reservation_are_the_hosts(tmp_path: Path) -> None:
    """Segment files mapped back to back with libc's mmap(MAP_FIXED) over one memfd
    reservation (how a region split into several /dev/shm files is made contiguous): the
    host learns the mappings from /proc/self/maps, the reservation's madvise populates
    them on the host (no RAM), a pin charges the files' pages, unlink after mapping keeps
    them."""
    host = _host(tmp_path, ram=4 * TiB, shm=2 * TiB)
    memory = host.rank(0)
    seg = 256 * GiB
    with patch_shm(memory) as files:
        reservation = os.memfd_create("reservation")
        os.ftruncate(reservation, 2 * seg)
        region = mmap.mmap(reservation, 2 * seg, flags=mmap.MAP_SHARED, prot=RW)
        os.close(reservation)
        base = ctypes.addressof(ctypes.c_char.from_buffer(region))
        for i in range(2):
            fd = os.open(f"{PATH}.{i}", os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
            os.ftruncate(fd, seg)
            assert _libc_map(base + i * seg, seg, fd) == base + i * seg
            os.close(fd)
        assert sorted(files.found) == [base, base + seg]
        for i in range(2):
            os.unlink(f"{PATH}.{i}")
        region.madvise(MADV_POPULATE_WRITE, seg - GiB, 2 * GiB)     # across the seam
        assert host.totals().shm == 2 * GiB and host.totals().anon == 0
        assert memory.pin(base, 2 * seg) == 0
        assert host.totals().shm == 2 * seg and host.totals().anon == 0
        memory.unpin(base)
        del region
    assert host.totals().pinned == 0


def test_statvfs_of_dev_shm_is_the_hosts_tmpfs(tmp_path: Path) -> None:
    import shutil

    host = _host(tmp_path, ram=4 * TiB, shm=TiB)
    with patch_shm(host.rank(0)):
        fd = _create(256 * GiB)
        os.posix_fallocate(fd, 0, 256 * GiB)
        usage = shutil.disk_usage("/dev/shm")
        assert (usage.total, usage.free) == (TiB, 768 * GiB)
        os.close(fd)
        os.unlink(PATH)
        assert shutil.disk_usage("/dev/shm").free == TiB
