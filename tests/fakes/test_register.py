"""cudaHostRegister: flags, overlap, size/NULL, limits, memory kinds (docs/cuda-runtime.md §2)."""

from __future__ import annotations

import ctypes
import gc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvreg.fakes.cuda.fake_cuda import FakeCuda
from kvreg.fakes.cuda.profile import PROFILES, DeviceProfile

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
PAGE = 4096


def _setup(profile: str | DeviceProfile | None = None, nbytes: int = 64 * MiB
           ) -> tuple[FakeCuda, object, int]:
    fake = FakeCuda(profile)
    buf = fake.virtual(nbytes, name="pool")
    return fake, fake.runtime, buf.data_ptr()


def _code(result: object) -> int:
    return int(result[0]) if isinstance(result, tuple) else int(result)  # type: ignore[index]


def _live(fake: FakeCuda) -> list[tuple[int, int, int]]:
    return [(r.base, r.size, r.flags) for r in fake.live_registrations()]


# -- flags (docs/cuda-runtime.md §2.1) -------------------------------------------------------------

@pytest.mark.parametrize("flags", [0, 1, 2, 3])
def test_documented_flags_succeed_and_are_kept(flags: int) -> None:
    # docs/cuda-runtime.md §2.1 flag table: Default 0, Portable 1, Mapped 2 combine freely [DOC]
    fake, rt, base = _setup()
    assert _code(rt.cudaHostRegister(base, MiB, flags)) == 0
    assert _live(fake) == [(base, MiB, flags)]


@pytest.mark.parametrize("flags", [0x10, 0xF0, 0xFFF2, 0xFFFFFFFF])
def test_invalid_flag_bits_give_invalid_value(flags: int) -> None:
    # docs/cuda-runtime.md §2.2 "Invalid flag bits" -> 1 [OBS-ext] (HIP tests); §11.1
    fake, rt, base = _setup()
    assert _code(rt.cudaHostRegister(base, MiB, flags)) == 1
    assert _live(fake) == []
    assert _code(rt.cudaGetLastError()) == 1


def test_read_only_unsupported_gives_801() -> None:
    # docs/cuda-runtime.md §2.2 "ReadOnly flag on a device lacking the attribute" -> 801 [DOC]
    fake, rt, base = _setup()
    assert _code(rt.cudaHostRegister(base, MiB, rt.cudaHostRegisterReadOnly)) == 801
    assert _live(fake) == []


def test_read_only_supported_succeeds() -> None:
    # docs/cuda-runtime.md §2.1 cudaDevAttrHostRegisterReadOnlySupported (113) [DOC]
    fake, rt, base = _setup(PROFILES["h200-r580"].replace(read_only_supported=True))
    assert _code(rt.cudaHostRegister(base, MiB, 8)) == 0
    assert _live(fake) == [(base, MiB, 8)]


def test_io_memory_not_permitted_gives_800() -> None:
    # docs/cuda-runtime.md §1 row 800 / §2.1 IoMemory "may give NOT_PERMITTED for
    # unprivileged users" [DOC]
    fake, rt, base = _setup()
    assert _code(rt.cudaHostRegister(base, MiB, rt.cudaHostRegisterIoMemory)) == 800
    assert _live(fake) == []
    fake2, rt2, base2 = _setup(PROFILES["h200-r580"].replace(io_memory_permitted=True))
    assert _code(rt2.cudaHostRegister(base2, MiB, 4)) == 0
    assert _live(fake2) == [(base2, MiB, 4)]


def test_host_register_unsupported_device_gives_801() -> None:
    # docs/cuda-runtime.md §2.1 "supported only on devices whose cudaDevAttrHostRegisterSupported
    # (99) is non-zero" [DOC]
    fake, rt, base = _setup(PROFILES["h200-r580"].replace(host_register_supported=False))
    assert _code(rt.cudaHostRegister(base, MiB, 0)) == 801
    assert _live(fake) == []


# -- size 0 / NULL -------------------------------------------------------------------------

def test_size_zero_gives_invalid_value() -> None:
    # docs/cuda-runtime.md §2.2 "size == 0 with a valid pointer" -> 1 [OBS-ext]
    fake, rt, base = _setup()
    assert _code(rt.cudaHostRegister(base, 0, 0)) == 1
    assert _code(fake.torch.cudaHostRegister(base, 0, 0)) == 1
    assert _live(fake) == []


def test_null_pointer_gives_invalid_value() -> None:
    # docs/cuda-runtime.md §2.2 "ptr == NULL (size > 0)" -> 1 [OBS-ext] HIP; [INF] CUDA
    fake, rt, _ = _setup()
    assert _code(rt.cudaHostRegister(0, MiB, 0)) == 1
    assert _code(rt.cudaHostRegister(None, MiB, 0)) == 1   # cuda-python: None is NULL (§9)
    assert _code(fake.torch.cudaHostRegister(0, MiB, 0)) == 1
    assert _live(fake) == []


# -- overlap: 712 ----------------------------------------------------------------------------

@pytest.mark.parametrize(("label", "off", "size"), [
    # docs/cuda-runtime.md §2.2 "Exactly the same range registered twice"
    ("exact twice", 0, 2 * MiB),
    ("same base, shorter", 0, PAGE),      # docs/cuda-runtime.md §2.2 "same base"
    ("same base, longer", 0, 4 * MiB),
    ("interior start", 80, 160),          # NVIDIA test_cudart.py: +80 B overlapping -> 712
    ("interior page", MiB, PAGE),         # lupine #437: interior page of a registered range
    ("partial, from before", -PAGE, 2 * PAGE),
    ("partial, past the end", 2 * MiB - 1, 2),
    ("superset", -PAGE, 3 * MiB),
])
def test_overlapping_register_gives_712(label: str, off: int, size: int) -> None:
    # docs/cuda-runtime.md §2.2 "New range overlaps bytes of an existing registration (same
    # base, an interior start, or a partial overlap)" -> 712 [OBS-ext]; "Exactly the same range
    # registered twice" -> 712 [OBS-ext]
    fake, rt, pool = _setup()
    base = pool + 4 * MiB
    assert _code(rt.cudaHostRegister(base, 2 * MiB, 0)) == 0
    assert _code(rt.cudaHostRegister(base + off, size, 0)) == 712, label
    assert _live(fake) == [(base, 2 * MiB, 0)]            # the first one is untouched
    assert _code(rt.cudaGetLastError()) == 712


def test_byte_adjacent_registrations_succeed() -> None:
    # docs/cuda-runtime.md §2.2 overlap is by byte range; [base, +n) and [base+n, ...) share
    # no byte [OBS-ext] (HIP Chunks_SingleAttempt: 16 adjacent 8 KiB slices)
    fake, rt, base = _setup()
    for i in range(16):
        assert _code(rt.cudaHostRegister(base + i * 8 * KiB, 8 * KiB, 0)) == 0
    assert len(fake.live_registrations()) == 16


def test_byte_disjoint_same_page_succeeds_by_default() -> None:
    # docs/cuda-runtime.md §2.2 "byte-disjoint from an existing registration but shares a 4 KiB
    # page" -> observed to succeed [OBS-ext] / [UNC]; profile overlap_granularity="byte"
    fake, rt, base = _setup()
    assert fake.profile.overlap_granularity == "byte"
    assert _code(rt.cudaHostRegister(base + 100, 100, 0)) == 0
    assert _code(rt.cudaHostRegister(base + 200, 100, 0)) == 0
    assert _code(rt.cudaHostRegister(base + 16, 84, 0)) == 0
    assert len(fake.live_registrations()) == 3


def test_byte_disjoint_same_page_gives_712_in_page_mode() -> None:
    # docs/cuda-runtime.md §2.2 same-page row [UNC] (vLLM PR #51081 assumes page rounding);
    # profile overlap_granularity="page"
    prof = PROFILES["h200-r580"].replace(overlap_granularity="page")
    fake, rt, base = _setup(prof)
    assert _code(rt.cudaHostRegister(base + 100, 100, 0)) == 0
    assert _code(rt.cudaHostRegister(base + 200, 100, 0)) == 712       # after, same page
    assert _code(rt.cudaHostRegister(base + 0, 50, 0)) == 712          # before, same page
    assert _code(rt.cudaHostRegister(base + PAGE - 1, 2, 0)) == 712    # straddles into it
    assert _code(rt.cudaHostRegister(base + PAGE, 100, 0)) == 0        # next page: fine
    assert _code(rt.cudaHostRegister(base + 3 * PAGE - 10, 10, 0)) == 0   # ends at a page end
    assert _code(rt.cudaHostRegister(base + 3 * PAGE, 10, 0)) == 0        # starts at next page
    assert [r.base - base for r in fake.live_registrations()] == [100, PAGE, 3 * PAGE - 10,
                                                                  3 * PAGE]


# -- alignment -------------------------------------------------------------------------------

@pytest.mark.parametrize(("off", "size"), [(1, 160), (80, 160), (4095, 2), (7, PAGE + 3)])
def test_unaligned_pointer_and_size_succeed(off: int, size: int) -> None:
    # docs/cuda-runtime.md §2.2 "Unaligned ptr and/or size not a multiple of the page size"
    # -> succeeds [OBS-ext] (NVIDIA test_cudart.py registers 160 B at a numpy address)
    fake, rt, base = _setup()
    assert _code(rt.cudaHostRegister(base + off, size, 3)) == 0
    assert _live(fake) == [(base + off, size, 3)]   # kept exactly as passed (§11.1)


def test_unaligned_real_numpy_buffer_registers() -> None:
    # docs/cuda-runtime.md §2.2 unaligned row: NVIDIA's own test registers 160 bytes of a numpy
    # array with flags 3 and expects success [OBS-ext]
    fake = FakeCuda()
    arr = np.zeros(160, np.uint8)
    assert _code(fake.runtime.cudaHostRegister(arr, 160, 3)) == 0
    assert _live(fake) == [(arr.ctypes.data, 160, 3)]
    assert _code(fake.runtime.cudaHostUnregister(arr)) == 0


# -- per-call ceiling (R580+) ------------------------------------------------------------------

def test_per_call_ceiling_r580() -> None:
    # docs/cuda-runtime.md §2.2 "A single call of 512 GiB or more (2^39 bytes)" -> 2 on R580+
    # [OBS-ext] (vllm #51080: 511.96 GiB succeeded, 512.15 GiB failed)
    fake, rt, base = _setup("h200-r580", nbytes=2 << 40)
    assert _code(rt.cudaHostRegister(base, 1 << 39, 0)) == 2
    assert _code(rt.cudaHostRegister(base, (1 << 39) + PAGE, 0)) == 2
    assert _live(fake) == []
    assert _code(rt.cudaGetLastError()) == 2
    assert _code(rt.cudaHostRegister(base, (1 << 39) - PAGE, 0)) == 0
    assert _live(fake) == [(base, (1 << 39) - PAGE, 0)]


def test_per_call_ceiling_absent_on_r575() -> None:
    # docs/cuda-runtime.md §2.2 same row: "maru says drivers 575.x and older do not have it"
    fake, rt, base = _setup("h100-r575", nbytes=2 << 40)
    assert _code(rt.cudaHostRegister(base, 1 << 39, 0)) == 0
    assert _code(rt.cudaHostRegister(base + (1 << 39), 1 << 40, 0)) == 0
    assert sum(r.size for r in fake.live_registrations()) == (1 << 39) + (1 << 40)


def test_ceiling_is_per_call_not_cumulative() -> None:
    # docs/cuda-runtime.md §2.2 "The limit is per call: many smaller calls that add up to more
    # than 512 GiB succeed" [OBS-ext]; §2.3 no documented maximum size
    fake, rt, base = _setup("h200-r580", nbytes=1 << 40)
    chunk = 64 * GiB
    for i in range(12):                               # 768 GiB in 64 GiB chunks
        assert _code(rt.cudaHostRegister(base + i * chunk, chunk, 0)) == 0
    assert sum(r.size for r in fake.live_registrations()) == 12 * chunk > 1 << 39


# -- memory kinds ------------------------------------------------------------------------------

def test_device_memory_gives_invalid_value() -> None:
    # docs/cuda-runtime.md §2.2 "Device memory (cudaMalloc pointer)" -> 1 [OBS-ext] ucx #4393
    fake = FakeCuda()
    rt = fake.runtime
    err, dev = rt.cudaMalloc(4 * MiB)
    assert int(err) == 0
    assert _code(rt.cudaHostRegister(dev, MiB, 0)) == 1
    assert _code(rt.cudaHostRegister(dev + MiB, PAGE, 0)) == 1    # interior too
    assert _live(fake) == []


@pytest.mark.parametrize("alloc", ["cudaHostAlloc", "cudaMallocHost"])
def test_host_alloc_memory_gives_profile_code(alloc: str) -> None:
    # docs/cuda-runtime.md §2.2 "Memory from cudaHostAlloc / cudaMallocHost" -> an error,
    # [UNC] probably 712; profile register_host_alloc_code
    for code in (712, 1):
        fake = FakeCuda(PROFILES["h200-r580"].replace(register_host_alloc_code=code))
        rt = fake.runtime
        args = (MiB, 0) if alloc == "cudaHostAlloc" else (MiB,)
        err, ptr = getattr(rt, alloc)(*args)
        assert int(err) == 0 and ptr
        assert _code(rt.cudaHostRegister(ptr, MiB, 0)) == code
        assert _code(rt.cudaHostRegister(ptr + PAGE, PAGE, 0)) == code
        assert _live(fake) == []                    # host-alloc blocks are not registrations
        assert _code(rt.cudaFreeHost(ptr)) == 0


def test_big_host_alloc_is_virtual_and_still_rejects_register() -> None:
    # docs/cuda-runtime.md §2.2 cudaHostAlloc row [UNC]: the rule holds for blocks of any size
    fake = FakeCuda()
    err, ptr = fake.runtime.cudaHostAlloc(8 * GiB, 0)
    assert int(err) == 0
    assert _code(fake.runtime.cudaHostRegister(ptr, GiB, 0)) == 712


def test_free_does_not_auto_unregister() -> None:
    # docs/cuda-runtime.md §2.2 "Freeing or munmapping memory without unregistering: the driver
    # keeps tracking the virtual range ... A fake should not auto-unregister on free" [OBS-ext]
    fake = FakeCuda()
    rt = fake.runtime
    arr = np.ones(3 * PAGE, np.uint8)
    ptr = arr.ctypes.data
    fake.track(arr, name="scratch")
    assert _code(rt.cudaHostRegister(ptr, arr.nbytes, 0)) == 0
    fake.space.forget(ptr)               # the "munmap": the address space forgets the buffer
    del arr
    gc.collect()
    assert _live(fake) == [(ptr, 3 * PAGE, 0)]
    assert _code(rt.cudaHostRegister(ptr, PAGE, 0)) == 712   # still pinned by the driver
    assert _code(rt.cudaHostUnregister(ptr)) == 0


def test_free_host_of_host_alloc_removes_only_that_block() -> None:
    # docs/cuda-runtime.md §2.2 / §3: registrations and cudaHostAlloc blocks are separate
    fake = FakeCuda()
    rt = fake.runtime
    buf = fake.virtual(MiB)
    assert _code(rt.cudaHostRegister(buf.data_ptr(), MiB, 0)) == 0
    err, ptr = rt.cudaHostAlloc(PAGE, 0)
    assert int(err) == 0
    assert _code(rt.cudaFreeHost(buf.data_ptr())) == 1     # not a cudaHostAlloc block
    assert _code(rt.cudaFreeHost(ptr)) == 0
    assert _code(rt.cudaFreeHost(ptr)) == 1                # twice
    assert _live(fake) == [(buf.data_ptr(), MiB, 0)]


def test_host_alloc_small_block_is_real_memory() -> None:
    # docs/cuda-runtime.md §2.2: cudaHostAlloc memory is usable host memory
    fake = FakeCuda()
    err, ptr = fake.runtime.cudaHostAlloc(64, 0)
    assert int(err) == 0
    arr = fake.cuda_runtime.host_alloc_array(ptr)
    assert arr is not None and arr.ctypes.data == ptr and arr.nbytes == 64
    arr[:] = 7
    assert int(arr.sum()) == 7 * 64


@pytest.mark.parametrize("ptr", [0xFFFF_FFFF_FFFF_0000, 1 << 63, (1 << 64) - PAGE])
def test_address_outside_host_memory_gives_invalid_value(ptr: int) -> None:
    # docs/cuda-runtime.md §2.2 "Address inside CUDA's reserved VA" -> 1 [OBS-ext] ucx #8827;
    # "Range not fully mapped in the process" -> 1 [OBS-ext]
    fake = FakeCuda()
    rt = fake.runtime
    assert _code(rt.cudaHostRegister(ptr, PAGE, 0)) == 1
    assert _live(fake) == []
    # and copies keep working afterwards (a registration there used to break them)
    _, dev = rt.cudaMalloc(MiB)
    _, stream = rt.cudaStreamCreate()
    assert _code(rt.cudaMemcpyAsync(dev, fake.virtual(PAGE).data_ptr(), PAGE, 1, stream)) == 0


def test_wrapping_range_gives_invalid_value() -> None:
    # docs/cuda-runtime.md §2.2 "Range not fully mapped in the process" -> 1 [OBS-ext]
    fake, rt, base = _setup()
    assert _code(rt.cudaHostRegister(base, (1 << 64) - base, 0)) == 1
    assert _live(fake) == []


def test_device_alias_is_not_host_memory() -> None:
    # docs/cuda-runtime.md §4: on WSL2 the alias is a device address, not host memory; docs/cuda-
    # runtime.md §2.2
    # device memory -> 1 [OBS-ext]
    fake, rt, base = _setup("wsl2")
    assert _code(rt.cudaHostRegister(base, MiB, 0)) == 0
    assert len(fake.live_registrations()) == 1
    err, alias = rt.cudaHostGetDevicePointer(base, 0)
    assert int(err) == 0 and alias != base
    assert _code(rt.cudaHostRegister(alias, MiB, 0)) == 1


# -- ranges that are not mapped memory (docs/cuda-runtime.md §2.2 [OBS-ext]) -----------------------

def test_virtual_buffer_registered_with_far_more_than_its_size_gives_invalid_value() -> None:
    # docs/cuda-runtime.md §2.2 "Range not fully mapped in the process (for example a size
    # far beyond a small malloc)" -> 1 [OBS-ext] HIP test "invalid memory size"
    fake = FakeCuda()
    buf = fake.virtual(4096)
    assert _code(fake.runtime.cudaHostRegister(buf.data_ptr(), GiB, 0)) == 1
    assert _code(fake.torch.cudaHostRegister(buf.data_ptr(), GiB, 0)) == 1
    assert _live(fake) == []
    assert _code(fake.runtime.cudaGetLastError()) == 1


def test_small_numpy_array_registered_with_a_gib_gives_invalid_value() -> None:
    # docs/cuda-runtime.md §2.2 "Range not fully mapped" -> 1 [OBS-ext]: real process memory,
    # judged from /proc/self/maps
    from kvreg.fakes.procmaps import process_maps

    if not process_maps().available:
        pytest.skip("no /proc/self/maps on this platform: real ranges are taken as mapped")
    fake = FakeCuda()
    arr = np.zeros(4096, np.uint8)
    assert _code(fake.runtime.cudaHostRegister(arr.ctypes.data, GiB, 0)) == 1
    assert _live(fake) == []
    # the array itself registers (docs/cuda-runtime.md §2.2 unaligned rows: NVIDIA's test_cudart
    # registers a
    # numpy buffer) and unregisters
    assert _code(fake.runtime.cudaHostRegister(arr.ctypes.data, arr.nbytes, 0)) == 0
    assert _code(fake.runtime.cudaHostUnregister(arr.ctypes.data)) == 0


def test_reserved_va_example_gives_invalid_value() -> None:
    # docs/cuda-runtime.md §2.2 "Address inside CUDA's reserved VA (for example MAP_FIXED at
    # 0xff0000000)" -> 1 [OBS-ext] openucx/ucx #8827
    fake = FakeCuda()
    assert _code(fake.runtime.cudaHostRegister(0xFF0000000, 4096, 0)) == 1
    assert _code(fake.torch.cudaHostRegister(0xFF0000000, 4096, 0)) == 1
    assert _live(fake) == []


def test_reserved_va_fails_even_when_the_process_maps_it() -> None:
    # the ucx report: the memory *is* mapped (MAP_FIXED) and registering still fails
    import ctypes
    import mmap

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    map_fixed_noreplace = 0x100000
    addr = libc.mmap(0xFF0000000, PAGE, mmap.PROT_READ | mmap.PROT_WRITE,
                     mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | map_fixed_noreplace, -1, 0)
    if addr != 0xFF0000000:
        pytest.skip("could not map 0xff0000000 in this process")
    try:
        fake = FakeCuda()
        assert _code(fake.runtime.cudaHostRegister(addr, PAGE, 0)) == 1
        # with no reservation in the profile, the same mapping registers
        open_fake = FakeCuda(PROFILES["h200-r580"].replace(reserved_va=()))
        assert _code(open_fake.runtime.cudaHostRegister(addr, PAGE, 0)) == 0
        assert _code(open_fake.runtime.cudaHostUnregister(addr)) == 0
    finally:
        libc.munmap(ctypes.c_void_p(addr), ctypes.c_size_t(PAGE))


def test_new_mappings_are_found_after_the_cache_was_filled() -> None:
    # /proc/self/maps is cached and re-read on a miss: memory mapped after the first read
    # registers, and a hit costs no read
    import mmap

    from kvreg.fakes.procmaps import ProcessMaps

    maps = ProcessMaps()
    if not maps.available:
        pytest.skip("no /proc/self/maps on this platform")
    maps.refresh()
    block = mmap.mmap(-1, 16 * PAGE)
    arr = np.frombuffer(block, np.uint8)
    ptr = arr.ctypes.data
    reads = maps.reads
    assert maps.is_mapped(ptr, 16 * PAGE, confirm=False)
    assert maps.reads == reads + 1          # the miss re-read the file once
    assert maps.is_mapped(ptr + PAGE, PAGE, confirm=False)
    assert maps.reads == reads + 1          # a hit reads nothing
    assert not maps.is_mapped(ptr, 1 << 46, confirm=False)    # far past every mapping
    del arr
    block.close()


def test_range_spanning_the_gap_between_two_virtual_buffers_gives_invalid_value() -> None:
    fake = FakeCuda()
    # docs/cuda-runtime.md §2.2 "range not fully mapped" -> 1: the guard between them
    a, b = sorted((fake.virtual(MiB), fake.virtual(MiB)), key=lambda t: t.data_ptr())
    assert b.data_ptr() > a.data_ptr() + MiB
    assert _code(fake.runtime.cudaHostRegister(a.data_ptr(),
                                                b.data_ptr() + MiB - a.data_ptr(), 0)) == 1
    assert _live(fake) == []


def test_device_memory_is_not_host_memory() -> None:
    # docs/cuda-runtime.md §2.2 "Device memory (cudaMalloc pointer)" -> 1 [OBS-ext] ucx #4393
    fake = FakeCuda()
    _, dev = fake.runtime.cudaMalloc(MiB)
    assert _code(fake.runtime.cudaHostRegister(dev, MiB, 0)) == 1
    assert _live(fake) == []


@settings(max_examples=200, deadline=None)
@given(nbytes=st.integers(1, 1 << 40), size=st.integers(1, 1 << 41),
       offset=st.integers(0, 1 << 20))
def test_virtual_buffer_is_mapped_exactly_up_to_its_page_rounded_end(
        nbytes: int, size: int, offset: int) -> None:
    # an mmap of nbytes maps whole pages: registering inside them succeeds, one byte past the
    # last page fails with 1 (docs/cuda-runtime.md §2.2 "range not fully mapped") [INF]
    fake = FakeCuda(PROFILES["h200-r580"].replace(per_call_limit=None))
    buf = fake.virtual(nbytes)
    mapped_end = buf.data_ptr() + ((nbytes + PAGE - 1) & ~(PAGE - 1))
    ptr = buf.data_ptr() + offset % nbytes
    expected = 0 if ptr + size <= mapped_end else 1
    assert _code(fake.runtime.cudaHostRegister(ptr, size, 0)) == expected
    assert len(_live(fake)) == (1 if expected == 0 else 0)


def test_memory_unmapped_since_the_maps_were_read_is_not_mapped() -> None:
    # docs/cuda-runtime.md §2.2 row "range not fully mapped" -> 1, for process memory the
    # fake's space does not hold: the answer is the live mappings', never a stale read of
    # /proc/self/maps (a cached hit once let a register across a freed buffer's page succeed)
    from kvreg.fakes.procmaps import process_maps

    if not process_maps().available:
        pytest.skip("no /proc/self/maps on this platform")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    size = 4 * PAGE       # PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS
    ptr = libc.mmap(None, size, 3, 0x22, -1, 0)
    assert ptr not in (None, ctypes.c_void_p(-1).value)
    fake = FakeCuda()
    assert _code(fake.runtime.cudaHostRegister(ptr, size, 0)) == 0
    assert _code(fake.runtime.cudaHostUnregister(ptr)) == 0
    process_maps().refresh()            # the cache holds the region as readable ...
    assert libc.munmap(ptr, size) == 0  # ... and it is unmapped after
    assert _code(fake.runtime.cudaHostRegister(ptr, PAGE, 0)) == 1
    assert _live(fake) == []
