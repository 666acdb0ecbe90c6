"""A fake CUDA process on a fake host: cudaHostRegister pins the host's pages (docs/host.md §5).

The hook sits at driver level, so every face reaches it; without a host attached the fake is
as before (the rest of tests/fakes runs without one).
"""

from __future__ import annotations

import ctypes
from pathlib import Path

import pytest

from kvreg.fakes.cuda import errors as E
from kvreg.fakes.cuda.fake_cuda import FakeCuda
from kvreg.fakes.cuda.host_pins import HostPins, attach_host
from kvreg.fakes.host.fake_host import FakeHost
from kvreg.fakes.host.limits import HostLimits

GiB = 1 << 30
MiB = 1 << 20


def _pins(tmp_path: Path, rank: int = 0, **limits: object) -> HostPins:
    path = tmp_path / "host.json"
    host = FakeHost(path) if path.exists() else \
        FakeHost.create(path, HostLimits(**limits))
    return attach_host(FakeCuda(), host.rank(rank))


def _rank(tmp_path: Path, rank: int = 0, **limits: object) -> tuple[FakeCuda, FakeHost]:
    pins = _pins(tmp_path, rank, **limits)
    return pins.fake, pins.memory.host


def test_each_registration_costs_its_page_tables_on_the_gpu(tmp_path: Path) -> None:
    fake, host = _rank(tmp_path, ram=1 << 40)
    rt = fake.cuda_runtime
    buf = fake.virtual(48 * GiB)
    _, free_before, total = rt.mem_get_info()
    assert rt.host_register(buf.data_ptr(), 48 * GiB, 0) == 0
    _, free_after, _ = rt.mem_get_info()
    assert free_before - free_after == 96 * MiB        # vLLM #51762: 96 MiB per 48 GiB
    assert host.totals().pinned == 48 * GiB
    assert rt.host_unregister(buf.data_ptr()) == 0
    assert rt.mem_get_info()[1] == free_before and host.totals().pinned == 0
    assert total == fake.profile.total_memory


def test_a_refused_pin_leaves_nothing_registered_and_sets_the_last_error(
        tmp_path: Path) -> None:
    fake, host = _rank(tmp_path, ram=64 * GiB)
    rt = fake.cuda_runtime
    buf = fake.virtual(100 * GiB)
    free = rt.mem_get_info()[1]
    assert rt.host_register(buf.data_ptr(), 100 * GiB, 0) == E.INVALID_VALUE
    assert fake.live_registrations() == [] and host.totals().pinned == 0
    assert rt.mem_get_info()[1] == free
    assert rt.get_last_error() == E.INVALID_VALUE
    assert rt.host_register(buf.data_ptr(), 32 * GiB, 0) == 0   # what fits still pins


def test_the_exhausted_code_is_the_profile_option(tmp_path: Path) -> None:
    fake, _ = _rank(tmp_path, ram=64 * GiB, pin_exhausted_code=2)
    buf = fake.virtual(100 * GiB)
    assert fake.cuda_runtime.host_register(buf.data_ptr(), 100 * GiB, 0) == \
        E.MEMORY_ALLOCATION


def test_every_face_reaches_the_host(tmp_path: Path) -> None:
    fake, host = _rank(tmp_path, ram=1 << 40)
    buf = fake.virtual(3 * GiB)
    base = buf.data_ptr()
    assert fake.torch_runtime.host_register(base, GiB, 0) == 0
    (err,) = fake.driver_api.cuMemHostRegister(base + GiB, GiB, 0)
    assert int(err) == 0
    lib = fake.load_libcudart()
    assert lib.cudaHostRegister(ctypes.c_void_p(base + 2 * GiB), ctypes.c_size_t(GiB),
                                ctypes.c_uint(0)) == 0
    assert host.totals().pinned == 3 * GiB
    for offset in (0, GiB, 2 * GiB):
        assert fake.cuda_runtime.host_unregister(base + offset) == 0
    assert host.totals().pinned == 0


def test_what_the_driver_refuses_never_reaches_the_host(tmp_path: Path) -> None:
    fake, host = _rank(tmp_path, ram=1 << 40)
    rt = fake.cuda_runtime
    buf = fake.virtual(2 * GiB)
    assert rt.host_register(buf.data_ptr(), GiB, 0) == 0
    assert rt.host_register(buf.data_ptr(), GiB, 0) == E.HOST_MEMORY_ALREADY_REGISTERED
    assert rt.host_register(buf.data_ptr() + GiB, 0, 0) == E.INVALID_VALUE
    assert rt.host_unregister(buf.data_ptr() + 1) == E.INVALID_VALUE   # interior: stays
    assert host.totals().pinned == GiB
    assert rt.host_unregister(buf.data_ptr()) == 0
    assert rt.host_unregister(buf.data_ptr()) == E.HOST_MEMORY_NOT_REGISTERED
    assert host.totals().pinned == 0


def test_page_tables_that_do_not_fit_the_gpu_fail_with_2(tmp_path: Path) -> None:
    fake, host = _rank(tmp_path, ram=1 << 42)
    rt = fake.cuda_runtime
    _, free, _ = rt.mem_get_info()
    code, _ = rt.malloc(free - 8 * MiB)            # the KV cache took nearly all of it
    assert code == 0
    buf = fake.virtual(8 * GiB)                    # needs 16 MiB of page tables
    assert rt.host_register(buf.data_ptr(), 8 * GiB, 0) == E.MEMORY_ALLOCATION
    assert host.totals().pinned == 0 and fake.live_registrations() == []
    assert rt.host_register(buf.data_ptr(), 4 * GiB, 0) == 0    # 8 MiB fit exactly


def test_two_ranks_share_one_region_and_pin_it_once(tmp_path: Path) -> None:
    ranks = [_pins(tmp_path, 0, ram=1 << 40), _pins(tmp_path, 1)]
    ranks[0].memory.shm_create("kv")
    ranks[0].memory.shm_ftruncate("kv", 64 * GiB)
    for p in ranks:
        buf = p.fake.virtual(64 * GiB)     # each rank maps the file at its own address
        p.memory.map_shm("kv", buf.data_ptr(), 64 * GiB)
        assert p.fake.cuda_runtime.host_register(buf.data_ptr(), 64 * GiB, 0) == 0
    t = ranks[0].memory.host.totals()
    assert t.pinned == 64 * GiB and t.shm == 64 * GiB and t.anon == 0


def test_attach_twice_and_detach(tmp_path: Path) -> None:
    fake, host = _rank(tmp_path, ram=1 << 40)
    with pytest.raises(ValueError, match="already has a host"):
        attach_host(fake, host.rank(0))
    fake.driver.host_register.__self__.detach()
    buf = fake.virtual(GiB)
    assert fake.cuda_runtime.host_register(buf.data_ptr(), GiB, 0) == 0
    assert host.totals().pinned == 0
