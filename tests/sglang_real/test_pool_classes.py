"""Every SGLang 0.5.23 host pool type x layout, built by the wheel's own constructors under
kvreg's fake at a small size and at 1 TiB and more (no RAM: kvreg_host_memory), judged by
kvreg's rules (PoolCheck), destroyed, and left with nothing registered."""

from __future__ import annotations

import contextlib
import resource
from collections.abc import Iterator
from typing import Any

import pytest
import sglang_pools as sp

from kvreg.fakes import FakeCuda
from kvreg.harness.pool_class import PoolCheck, kvreg_host_memory

TiB = 1 << 40
SMALL_PAGES = 80          # more pages than layers (SGLang 0.5.23 indexes per-layer views by page)
# no per-call ceiling on this profile (R575 and older): the G=None layouts, one call of the
# whole buffer, register at 1 TiB; the R580 ceiling is test_one_call_layouts_fail_above_...
PROFILE = "h100-r575"


def tib_pages(kind: str, layout: str) -> int:
    return TiB // sp.bytes_per_page(kind, layout) + 1


@contextlib.contextmanager
def world(sglang: Any, profile: str = PROFILE) -> Iterator[tuple[FakeCuda, list[Any], Any]]:
    """A fake, no-RAM host memory for SGLang's allocator, a host-memory budget that admits
    TiB pools, and a spy on the granularity each buffer is registered with."""
    fake = FakeCuda(profile)
    seen: list[Any] = []
    common = sglang.common
    original = common._cuda_host_register

    def spy(buffer: Any, registration_granularity_bytes: int | None = None) -> None:
        seen.append(registration_granularity_bytes)
        original(buffer, registration_granularity_bytes)

    with fake.patch(), kvreg_host_memory(
            fake, allocators=[(common.HostTensorAllocator, "allocate")]) as memory, \
            sglang.base.host_memory_budget_scope(1 << 52):
        common._cuda_host_register = spy
        try:
            yield fake, seen, memory
        finally:
            common._cuda_host_register = original


def test_tib_pools_cost_no_ram(sglang, gpu_path) -> None:
    """First in this file, so the peak it measures is this test's own. The TiB pools, built one
    after the other, raise the peak RSS by no more than SGLang's own per-token index arrays
    (HostKVCache.clear: int64 free slots, uint8 state, bool used flag: 10 bytes a token, twice
    where an anchor pool lends its sizes) plus 512 MiB: never by the pool bytes."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10
    built_bytes, bookkeeping = 0, 0
    for kind, layout in sp.CASES:
        with world(sglang) as (_fake, _, _):
            built = sp.build(sglang, kind, layout, tib_pages(kind, layout))
            built_bytes += sum(s.nbytes for s in built.geometry.buffers())
            anchored = 2 if kind in ("dsa_indexer", "mha_k_only") else 1
            bookkeeping = max(bookkeeping, 10 * built.pool.size * anchored)
            built.pool.destroy()
            del built
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10
    assert built_bytes >= len(sp.CASES) * TiB
    assert peak - before < bookkeeping + (512 << 20), (
        f"{(peak - before) >> 20} MiB for {built_bytes >> 40} TiB of pools; SGLang's own "
        f"index arrays account for {bookkeeping >> 20} MiB")


@pytest.mark.parametrize("size", ["small", "tib"])
@pytest.mark.parametrize(("kind", "layout"), sp.CASES, ids=[f"{k}-{lay}" for k, lay in sp.CASES])
def test_pool_registers_every_byte_and_destroy_releases_it(sglang, gpu_path, kind: str,
                                                           layout: str, size: str) -> None:
    pages = SMALL_PAGES if size == "small" else tib_pages(kind, layout)
    with world(sglang) as (fake, seen, _):
        built = sp.build(sglang, kind, layout, pages)
        specs = built.geometry.buffers()
        total = sum(s.nbytes for s in specs)
        assert size == "small" or total >= TiB
        # the granularity SGLang passed, buffer by buffer, is kvreg's geometry
        assert seen == [s.granularity for s in specs]
        assert [tuple(t.shape) for t in built.buffers.values()] == [s.shape for s in specs]
        check = PoolCheck(fake, built.buffers, built.geometry)
        check.assert_registered()
        assert sum(r.size for r in fake.live_registrations()) == total
        built.pool.destroy()
        check.assert_released()
        assert fake.live_registrations() == []
        built.pool.destroy()                     # idempotent: no second unregister
        check.assert_released()


def test_on_a_cpu_build_destroy_skips_unregistering(sglang) -> None:
    """Without the CUDA gate (``_is_cuda`` False on CPU torch) destroy() leaves every
    registration: kvreg reports each as a leak, naming the buffer."""
    with world(sglang) as (fake, _, _):
        built = sp.build(sglang, "mha", "page_first", SMALL_PAGES)
        check = PoolCheck(fake, built.buffers, built.geometry)
        check.assert_registered()
        built.pool.destroy()
        found = check.released()
        assert [v.rule for v in found] == ["leak"]
        assert found[0].message.startswith("chunk [kv_buffer+0x0, +")
        for r in fake.live_registrations():       # leave the fake clean
            fake.torch.cudaHostUnregister(r.base)


@pytest.mark.parametrize(("kind", "layout"), [
    ("mha", "layer_first"), ("mha", "page_head"), ("mha_k_only", "layer_first"),
    ("mla", "layer_first"), ("dsa_indexer", "layer_first")])
def test_one_call_layouts_fail_above_the_r580_ceiling(sglang, gpu_path, kind: str,
                                                      layout: str) -> None:
    """SGLang passes no granularity for these layouts (docs/pools.md §2) and registers the
    whole buffer in one call, which R580+ drivers refuse with 2 at 512 GiB and above
    (docs/cuda-runtime.md §2.2). Its error path then calls ``cudaGetErrorString(rc)`` with an
    int, which torch's binding refuses (docs/cuda-runtime.md §7): the constructor raises
    TypeError and kvreg names the code it hid. Both bugs are in kvreg-baseline.txt too."""
    with world(sglang, "h200-r580") as (fake, seen, memory):
        pages = tib_pages(kind, layout)
        with pytest.raises(TypeError, match="cudaGetErrorString") as info:
            sp.build(sglang, kind, layout, pages)
        assert seen == [None]
        assert fake.trace.codes("cudaHostRegister") == [2]
        assert fake.live_registrations() == []
        buffer = memory.tensor(memory.allocations[-1].name)
        assert buffer is not None and buffer.numel() * buffer.element_size() >= TiB
        found = PoolCheck(fake, {"kv_buffer": buffer}, granularity=None,
                          raised=info.value).registered()
        assert [v.rule for v in found] == ["error-reported"]
        assert found[0].message.startswith("register() of kv_buffer raised TypeError")
        assert "instead of reporting cudaErrorMemoryAllocation (2" in found[0].message
