"""SGLang's chunked-registration unit tests (docs/pools.md §3 tests 8-11), against the fake.

The registration functions below are written in SGLang's style from the paraphrase in
docs/pools.md §1.1 (no upstream code is copied): they reach cudart through
``torch.cuda.cudart()``, which ``fake.patch()`` points at the fake, and register a virtual
buffer, so the fake's real rules (overlap, per-call ceiling, unregister codes) apply instead of
a record-only stand-in.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from kvreg.fakes.cuda.fake_cuda import FakeCuda

torch = pytest.importorskip("torch", reason="the SGLang functions reach cudart through torch")

MiB, GiB = 1 << 20, 1 << 30
ATTR = "_sglang_cuda_host_registered_ranges"


# -- the function under test, SGLang style (docs/pools.md §1.1) --------------------------------

def _unregister_ranges(cudart: Any, ranges: list[tuple[int, int]], *, operation: str
                       ) -> list[tuple[int, int]]:
    failed = []
    for ptr, size in reversed(ranges):
        ret = cudart.cudaHostUnregister(ptr)
        if int(ret) != 0:
            failed.append((ptr, size))
    return list(reversed(failed))


def cuda_host_register(buffer: Any, granularity: int | None, *, limit_gb: int = 1) -> None:
    cudart = torch.cuda.cudart()
    base = buffer.data_ptr()
    total = buffer.numel() * buffer.element_size()
    limit = max(limit_gb, 1) * GiB
    if granularity is None:
        chunk = total
    else:
        if granularity <= 0:
            raise ValueError(f"registration_granularity_bytes must be positive, got {granularity}")
        if granularity > limit:
            raise ValueError("Host registration granularity exceeds the configured chunk limit: "
                             f"granularity={granularity}, chunk_limit={limit}")
        chunk = limit // granularity * granularity
    done: list[tuple[int, int]] = []
    off = 0
    try:
        while off < total:
            size = min(chunk, total - off)
            ptr = base + off
            ret = cudart.cudaHostRegister(ptr, size, 0)
            if int(ret) != 0:
                raise RuntimeError(
                    f"cudaHostRegister failed (rc={int(ret)}, {cudart.cudaGetErrorString(ret)}) "
                    f"at offset={off} size={size} (total={total}, chunk_limit={chunk}); host "
                    "buffer is not pinned and device transfers may silently return stale data.")
            done.append((ptr, size))
            off += size
    except BaseException:
        failed = _unregister_ranges(cudart, done, operation="registration rollback")
        if failed:
            setattr(buffer, ATTR, failed)
        raise
    setattr(buffer, ATTR, done)


def cuda_host_unregister(buffer: Any) -> None:
    cudart = torch.cuda.cudart()
    ranges = getattr(buffer, ATTR, None)
    if ranges is None:
        ranges = [(buffer.data_ptr(), buffer.numel() * buffer.element_size())]
    if not ranges:
        return
    failed = _unregister_ranges(cudart, ranges, operation="host-pool destroy")
    setattr(buffer, ATTR, failed)


# -- the scenarios ----------------------------------------------------------------------------

def _regs(fake: FakeCuda) -> list[tuple[int, int, int]]:
    return [tuple(a) for a in fake.trace.args("cudaHostRegister")]  # type: ignore[misc]


def _unregs(fake: FakeCuda) -> list[int]:
    return [a[0] for a in fake.trace.args("cudaHostUnregister")]


def test_registration_boundaries_honor_page_copy_granularity() -> None:
    # docs/pools.md §3 test 11: total 2500 MiB, G = 300 MiB, LIM = 1 GiB -> chunk 900 MiB
    fake = FakeCuda()
    buf = fake.virtual(2500 * MiB, "uint8", name="kv_buffer")
    base, g = buf.data_ptr(), 300 * MiB
    with fake.patch():
        cuda_host_register(buf, g)
    assert _regs(fake) == [(base, 900 * MiB, 0), (base + 900 * MiB, 900 * MiB, 0),
                           (base + 1800 * MiB, 700 * MiB, 0)]
    assert all((ptr - base) % g == 0 for ptr, _, _ in _regs(fake))
    assert [(r.base, r.size) for r in fake.live_registrations()] == \
        [(p, s) for p, s, _ in _regs(fake)]
    # no page of G bytes straddles a seam, so a page copy never spans two registrations
    with fake.patch():
        cuda_host_unregister(buf)
    assert fake.live_registrations() == []


def test_unregister_releases_every_registered_chunk_once() -> None:
    # docs/pools.md §3 test 8: 2 GiB + 17 with G = 1 GiB; unregister twice; reverse order, once
    fake = FakeCuda()
    buf = fake.virtual(2 * GiB + 17, "uint8", name="kv_buffer")
    base = buf.data_ptr()
    with fake.patch():
        cuda_host_register(buf, GiB)
        assert len(fake.live_registrations()) == 3
        cuda_host_unregister(buf)
        calls_after_first = len(fake.trace)
        cuda_host_unregister(buf)                       # second teardown: a no-op
    assert _unregs(fake) == [base + 2 * GiB, base + GiB, base]
    assert len(fake.trace) == calls_after_first
    assert fake.trace.codes("cudaHostUnregister") == [0, 0, 0]
    assert fake.live_registrations() == []
    assert getattr(buf, ATTR) == []


def test_double_unregister_without_bookkeeping_is_caught_by_the_fake() -> None:
    # docs/cuda-runtime.md §3 "Second unregister of the same base" -> 713 [INF]: what the fake
    # says when the ranges attribute is lost and the compatibility path runs again
    fake = FakeCuda()
    buf = fake.virtual(2 * GiB + 17, "uint8", name="kv_buffer")
    with fake.patch():
        cuda_host_register(buf, GiB)
        cuda_host_unregister(buf)
        delattr(buf, ATTR)
        cuda_host_unregister(buf)                         # tries the whole-buffer base
    assert fake.trace.codes("cudaHostUnregister") == [0, 0, 0, 713]
    assert getattr(buf, ATTR) == [(buf.data_ptr(), 2 * GiB + 17)]


def test_registration_failure_rolls_back_prior_chunks() -> None:
    # docs/pools.md §3 test 9: fail_on_registration=2 -> RuntimeError matching offset=1073741824;
    # registrations == [(base,1GiB,0), (base+1GiB,1GiB,0)]; unregistrations == [base]
    fake = FakeCuda()
    buf = fake.virtual(2 * GiB + 17, "uint8", name="kv_buffer")
    base = buf.data_ptr()
    fake.inject("cudaHostRegister", nth=2, error=1)
    with fake.patch(), pytest.raises(RuntimeError, match=re.escape("offset=1073741824")) as info:
        cuda_host_register(buf, GiB)
    assert "rc=1, invalid argument" in str(info.value)
    assert _regs(fake) == [(base, GiB, 0), (base + GiB, GiB, 0)]
    assert _unregs(fake) == [base]
    assert fake.live_registrations() == []
    assert not hasattr(buf, ATTR)                       # docs/pools.md §1.1: left unset
    # docs/cuda-runtime.md §6 known failure mode: the failure stays pending in torch's runtime
    assert fake.torch_runtime.peek_at_last_error() == 1


def test_missing_copy_granularity_preserves_single_registration() -> None:
    # docs/pools.md §3 test 10: 2 GiB + 17 with no G and LIM = 1 GiB -> one call (base, total, 0)
    fake = FakeCuda()
    buf = fake.virtual(2 * GiB + 17, "uint8", name="kv_buffer")
    with fake.patch():
        cuda_host_register(buf, None)
    assert _regs(fake) == [(buf.data_ptr(), 2 * GiB + 17, 0)]
    with fake.patch():
        cuda_host_unregister(buf)
    assert _unregs(fake) == [buf.data_ptr()]


def test_single_call_over_512_gib_fails_on_r580() -> None:
    # docs/cuda-runtime.md §2.2 per-call ceiling [OBS-ext] + docs/pools.md §1.1 "chunk := total
    # ... even if total > LIM": the legacy path hits the 512 GiB ceiling; chunking avoids it
    fake = FakeCuda("h200-r580")
    buf = fake.virtual(600 * GiB, "uint8", name="kv_buffer")
    with fake.patch(), pytest.raises(RuntimeError, match=r"rc=2, out of memory"):
        cuda_host_register(buf, None)
    assert fake.live_registrations() == []
    with fake.patch():
        cuda_host_register(buf, 4 * MiB, limit_gb=256)
        assert len(fake.live_registrations()) == 3
        cuda_host_unregister(buf)
    assert fake.live_registrations() == []


def test_zero_byte_buffer_makes_no_calls() -> None:
    # docs/pools.md §1.1 "A zero-byte buffer makes no calls, and ranges=[] is stored"
    fake = FakeCuda()
    buf = fake.virtual(0, "uint8")
    with fake.patch():
        cuda_host_register(buf, MiB)
        cuda_host_unregister(buf)
    assert len(fake.trace) == 0
    assert getattr(buf, ATTR) == []


@pytest.mark.parametrize(("g", "message"), [
    (0, "must be positive"), (-5, "must be positive"), (2 * GiB, "exceeds the configured"),
])
def test_bad_granularity_makes_no_calls(g: int, message: str) -> None:
    # docs/pools.md §1.1 "if G <= 0: fail with ValueError"; "if G > LIM: fail with ValueError"
    fake = FakeCuda()
    buf = fake.virtual(4 * MiB, "uint8")
    with fake.patch(), pytest.raises(ValueError, match=message):
        cuda_host_register(buf, g)
    assert len(fake.trace) == 0


def test_second_registration_of_a_pinned_pool_gives_712() -> None:
    # docs/cuda-runtime.md §10 sglang PR #38832 "Re-registering already-pinned pools gives 712"
    # [OBS-ext]; §2.2 "Exactly the same range registered twice" -> 712
    fake = FakeCuda()
    buf = fake.virtual(2 * GiB + 17, "uint8")
    with fake.patch():
        cuda_host_register(buf, GiB)
        first = getattr(buf, ATTR)
        with pytest.raises(RuntimeError, match="rc=712"):
            cuda_host_register(buf, GiB)
        # the rollback unregistered nothing of the first registration (done was empty)
        assert [(r.base, r.size) for r in fake.live_registrations()] == first
        assert getattr(buf, ATTR) == first
        cuda_host_unregister(buf)
    assert fake.live_registrations() == []
