"""The reference registration against the fake CUDA runtime (issue: reference registration).

Facts: docs/pools.md §1.1 (algorithm, rollback, teardown), §5.2 (straddling copies fail),
docs/cuda-runtime.md §2.2 (512 GiB per-call ceiling on R580+).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvreg.fakes import FakeCuda
from kvreg.harness.cuda import reference
from kvreg.harness.cuda.reference import RegistrationError, register, teardown
from kvreg.harness.cuda.transfers import copy_every_page
from kvreg.harness.plan.chunking import plan_pool
from kvreg.harness.pools import PoolGeometry, make_geometry
from kvreg.harness.pools.buffers import allocate
from kvreg.harness.strategies import chunk_limits, registered_geometries

GiB = 1 << 30
TiB = 1 << 40


def register_pool(fake: FakeCuda, face: object, geometry: PoolGeometry, buffers: list[object],
                  limit: int, algorithm: str = "reference") -> list[list[tuple[int, int]]]:
    """Register every buffer with the chunking one algorithm plans (all or nothing per pool)."""
    plan = plan_pool(geometry, limit, algorithm)  # type: ignore[arg-type]
    done: list[list[tuple[int, int]]] = []
    try:
        for bp in plan.buffers:
            buf = buffers[bp.index]
            unit = bp.plan.chunks[0][1] if algorithm == "upstream" and bp.unit is None else bp.unit
            done.append(register(face, buf.data_ptr(), bp.spec.nbytes,  # type: ignore[attr-defined]
                                 granularity=unit, chunk_limit=max(limit, unit or 1)))
    except Exception:
        for ranges in reversed(done):
            teardown(face, ranges)
        raise
    return done


def mla_4tib() -> PoolGeometry:
    # DeepSeek-V3 MLA, bf16, page 64 tokens x 61 layers = 4,497,408 B (docs/pools.md §2.10)
    page = 64 * 61 * 576 * 2
    return make_geometry("mla", layout="page_first_direct", layer_num=61, kv_lora_rank=512,
                         qk_rope_head_dim=64, dtype="bfloat16", page_size=64,
                         page_num=(4 * TiB) // page)


def mha_600gib_layer_first() -> PoolGeometry:
    # layer_first MHA: upstream passes no granularity, so one call of ~600 GiB (docs/pools.md §2.1)
    per_page = 2 * 80 * 64 * 8 * 128 * 2
    return make_geometry("mha", layout="layer_first", layer_num=80, head_num=8, head_dim=128,
                         dtype="bfloat16", page_size=64, page_num=(600 * GiB) // per_page)


@pytest.mark.parametrize("make", [mla_4tib, mha_600gib_layer_first])
def test_huge_pools_register_with_reference_under_r580(make: object) -> None:
    geometry = make()  # type: ignore[operator]
    fake = FakeCuda("h200-r580")
    buffers = allocate(geometry, fake.space)
    assert geometry.total_nbytes > 512 * GiB
    ranges = register_pool(fake, fake.torch, geometry, buffers, 256 * GiB)
    assert sum(s for r in ranges for _, s in r) == geometry.total_nbytes
    assert max(s for r in ranges for _, s in r) <= 256 * GiB
    for r in ranges:
        assert teardown(fake.torch, r) == []
    assert fake.live_registrations() == []


@pytest.mark.parametrize("make", [mla_4tib, mha_600gib_layer_first])
def test_one_call_when_no_granularity_fails_above_the_ceiling(make: object) -> None:
    """SGLang's algorithm without a granularity makes one call for the whole buffer."""
    geometry = make()  # type: ignore[operator]
    fake = FakeCuda("h200-r580")
    buf = allocate(geometry, fake.space)[0]
    with pytest.raises(RegistrationError, match=r"rc=2, out of memory\) at offset=0"):
        # one call: the "chunk" is the whole buffer (docs/pools.md §1.1, G absent)
        register(fake.torch, buf.data_ptr(), buf.nbytes, granularity=None,
                 chunk_limit=buf.nbytes)
    assert fake.trace.args("cudaHostRegister") == [(buf.data_ptr(), buf.nbytes, 0)]
    assert fake.live_registrations() == []
    # the same single call succeeds on a pre-R580 driver (no ceiling: docs/cuda-runtime.md §2.2)
    old = FakeCuda("h100-r575")
    old_buf = allocate(geometry, old.space)[0]
    assert int(old.torch.cudaHostRegister(old_buf.data_ptr(), old_buf.nbytes, 0)) == 0
    assert int(old.torch.cudaHostUnregister(old_buf.data_ptr())) == 0


def test_one_call_upstream_fails_and_reference_passes_for_the_600gib_layer_first() -> None:
    geometry = mha_600gib_layer_first()
    for algorithm, ok in (("upstream", False), ("reference", True)):
        fake = FakeCuda("h200-r580")
        buffers = allocate(geometry, fake.space)
        if ok:
            register_pool(fake, fake.torch, geometry, buffers, 256 * GiB, algorithm)
            assert len(fake.live_registrations()) == 3
        else:
            with pytest.raises(RegistrationError, match=r"rc=2, out of memory"):
                register(fake.torch, buffers[0].data_ptr(), buffers[0].nbytes,
                         granularity=buffers[0].nbytes, chunk_limit=buffers[0].nbytes)
            assert fake.live_registrations() == []


def test_batch_copy_of_every_page_passes_for_reference_fails_for_byte_offset() -> None:
    geometry = make_geometry("mla", layout="page_first_direct", layer_num=61, kv_lora_rank=512,
                             qk_rope_head_dim=64, dtype="bfloat16", page_size=64, page_num=2000)
    outcomes = {}
    for algorithm in ("reference", "byte-offset"):
        fake = FakeCuda()
        buffers = allocate(geometry, fake.space)
        ranges = register_pool(fake, fake.runtime, geometry, buffers, GiB, algorithm)
        result = copy_every_page(fake.runtime, geometry, buffers,
                                 fault_detail=lambda f=fake: f.cuda_runtime.last_copy_fault)
        outcomes[algorithm] = result
        for r in ranges:
            teardown(fake.runtime, r)
    assert outcomes["reference"].ok and outcomes["reference"].copies == 2000
    bad = outcomes["byte-offset"]
    assert bad.code == 1                       # "invalid argument" (docs/pools.md §5.2)
    assert bad.failed_row == 238               # 1 GiB // 4,497,408 B: the first straddling page
    assert "spans two separate registrations" in bad.detail


@st.composite
def pool_case(draw: st.DrawFn) -> tuple[PoolGeometry, int, int]:
    g = draw(registered_geometries())
    limit = draw(chunk_limits(g))
    calls = plan_pool(g, limit, "reference").calls
    return g, limit, draw(st.integers(1, max(calls, 1)))


@given(pool_case(), st.sampled_from(["torch", "cuda"]))
def test_rollback_leaves_nothing_whichever_call_fails(case: tuple[PoolGeometry, int, int],
                                                      face_name: str) -> None:
    geometry, limit, nth = case
    fake = FakeCuda()
    face = fake.torch if face_name == "torch" else fake.runtime
    buffers = allocate(geometry, fake.space, real=False)
    fake.inject("cudaHostRegister", nth=nth, error=2)
    with pytest.raises(RegistrationError, match="rc=2"):
        register_pool(fake, face, geometry, buffers, limit)
    assert fake.live_registrations() == []


@given(pool_case())
def test_teardown_twice_releases_each_chunk_once(case: tuple[PoolGeometry, int, int]) -> None:
    geometry, limit, _ = case
    fake = FakeCuda()
    buffers = allocate(geometry, fake.space)
    all_ranges = register_pool(fake, fake.torch, geometry, buffers, limit)
    registered = [p for r in all_ranges for p, _ in r]
    for r in all_ranges:
        assert teardown(fake.torch, r) == []
        assert teardown(fake.torch, r) == []      # idempotent: no calls the second time
    unregs = [a[0] for a in fake.trace.args("cudaHostUnregister")]
    assert sorted(unregs) == sorted(registered) and len(set(unregs)) == len(unregs)
    assert fake.trace.codes("cudaHostUnregister") == [0] * len(unregs)


def test_teardown_reports_what_it_could_not_release_and_retries_it() -> None:
    fake = FakeCuda()
    buf = fake.virtual(3 * GiB, name="pool")
    ranges = register(fake.torch, buf.data_ptr(), buf.nbytes, granularity=GiB,
                      chunk_limit=GiB)
    fake.inject("cudaHostUnregister", nth=2, error=4)   # cudaErrorCudartUnloading
    failed = teardown(fake.torch, ranges)
    assert failed == [(buf.data_ptr() + GiB, GiB, 4)]
    assert ranges == [(buf.data_ptr() + GiB, GiB)]     # kept for a retry, not hidden
    assert teardown(fake.torch, ranges) == [] and ranges == []
    assert fake.live_registrations() == []


def test_error_message_names_call_code_string_offset_size_total() -> None:
    fake = FakeCuda()
    mib = 1 << 20
    buf = fake.virtual(2500 * mib)
    fake.inject("cudaHostRegister", nth=2, error=1)
    with pytest.raises(RegistrationError) as info:
        register(fake.runtime, buf.data_ptr(), buf.nbytes, granularity=300 * mib,
                 chunk_limit=GiB)
    msg = str(info.value)
    for part in ("cudaHostRegister failed", "rc=1", "invalid argument",
                 f"offset={900 * mib}", f"size={900 * mib}", f"total={2500 * mib}",
                 "rolled back 1 of 1"):
        assert part in msg
    # cuda-python's pending error was drained (docs/cuda-runtime.md §6)
    assert int(fake.runtime.cudaGetLastError()[0]) == 0


def test_exception_inside_the_loop_rolls_back_and_propagates() -> None:
    fake = FakeCuda()
    buf = fake.virtual(3 * GiB)
    fake.faults.arm("cudart.cudaHostRegister", raise_=KeyboardInterrupt, nth=3)
    with pytest.raises(KeyboardInterrupt):
        register(fake.torch, buf.data_ptr(), buf.nbytes, granularity=GiB, chunk_limit=GiB)
    assert fake.live_registrations() == []


def test_sglang_style_entry_points(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeCuda()
    buf = fake.virtual(2 * GiB + 17, name="kv")
    monkeypatch.setenv("SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB", "1")
    with fake.patch():
        reference.register_buffer(buf, GiB)
        assert [s for _, s in getattr(buf, reference.RANGES_ATTR)] == [GiB, GiB, 17]
        reference.teardown_buffer(buf)
        reference.teardown_buffer(buf)
    # docs/pools.md §3 test 8: reverse order, each chunk once
    base = buf.data_ptr()
    assert [a[0] for a in fake.trace.args("cudaHostUnregister")] == [
        base + 2 * GiB, base + GiB, base]
    monkeypatch.setenv("SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB", "lots")
    with pytest.raises(ValueError, match="whole number of GiB"):
        reference.chunk_limit_from_env()
