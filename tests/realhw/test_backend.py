"""``RealCuda``: the fake's surface, the fake's recorder, and a driver left clean after faults.

Without a GPU the real modules are exercised two ways: the real cuda-bindings (every call
returns 35 here, recorded like any other result), and the fake's *unwrapped* faces standing
in for ``cuda.bindings.runtime`` and ``torch.cuda.cudart()`` — modules that behave like the
real ones — so the rollback logic is checked against a driver that really holds state.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import pytest

from kvreg.fakes.cuda.fake_cuda import FakeCuda
from kvreg.harness.cuda import reference
from kvreg.realhw.backend import (
    INTERFACE,
    CudaBackend,
    HardwareUnavailable,
    RealCuda,
    VirtualBuffersUnsupported,
    _BindingsModule,
    live_from_trace,
)

MiB = 1 << 20


def stand_in(profile: Any = None) -> tuple[RealCuda, FakeCuda]:
    """A RealCuda whose "real" modules are a fake's unwrapped faces (and that fake)."""
    fake = FakeCuda(profile)
    real = RealCuda(runtime_module=fake.runtime._kvreg_target,
                    torch_module=fake.torch._kvreg_target, profile=fake.profile)
    return real, fake


def _shape(fn: Any) -> list[tuple[str, Any, Any]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


@pytest.mark.parametrize("name", INTERFACE)
def test_real_and_fake_expose_the_same_member(name: str) -> None:
    fake_attr = inspect.getattr_static(FakeCuda, name, None)
    real_attr = inspect.getattr_static(RealCuda, name, None)
    fake_inst, real_inst = FakeCuda(), stand_in()[0]
    assert hasattr(fake_inst, name) and hasattr(real_inst, name)
    if callable(fake_attr) and not isinstance(fake_attr, property):
        assert callable(real_attr), f"RealCuda.{name} is not a method"
        assert _shape(real_attr) == _shape(fake_attr), f"signatures of {name} differ"


def test_both_satisfy_the_backend_protocol() -> None:
    assert isinstance(FakeCuda(), CudaBackend)
    assert isinstance(stand_in()[0], CudaBackend)


def test_the_real_runtime_is_recorded_and_returns_its_real_codes() -> None:
    pytest.importorskip("cuda.bindings.runtime")
    real = RealCuda()
    code = int(real.runtime_module.cudaGetDeviceCount()[0])
    buf = real.buffer(MiB, name="pool")
    res = real.runtime.cudaHostRegister(buf.ctypes.data, MiB, 0)
    assert int(res[0]) == (code if code else 0)
    (entry,) = real.trace.calls("cudaHostRegister")
    assert entry.face == "cuda" and entry.code == int(res[0]) and not entry.injected
    assert "pool" in real.trace.format()
    real.release_all()
    assert real.leak_report() == ""
    real.forget(buf)


def test_an_injected_fault_never_reaches_the_real_runtime() -> None:
    pytest.importorskip("cuda.bindings.runtime")
    real = RealCuda()
    real.inject("cudaHostRegister", nth=1, error="cudaErrorMemoryAllocation")
    res = real.runtime.cudaHostRegister(0x10000, 4096, 0)
    assert int(res[0]) == 2 and res[0].name == "cudaErrorMemoryAllocation"
    (entry,) = real.trace
    assert entry.injected and entry.code == 2


def test_virtual_buffers_are_fake_only() -> None:
    with pytest.raises(VirtualBuffersUnsupported, match="fake-only"):
        RealCuda().virtual((1 << 40,), "uint8")


def test_torch_face_says_why_it_is_missing_on_a_cpu_build() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("torch has a usable GPU here")
    with pytest.raises(HardwareUnavailable, match=r"torch.cuda.cudart\(\) is unavailable"):
        RealCuda().torch  # noqa: B018


def test_patch_is_a_no_op_context() -> None:
    real = RealCuda()
    with real.patch() as same:
        assert same is real


def test_rollback_on_an_injected_fault_really_unregisters() -> None:
    # the point of the recorder on hardware: a fault injected at chunk 3 must leave the
    # driver (here: a fake standing in for it) with nothing pinned
    for face in ("torch", "runtime"):
        real, driver = stand_in()
        buf = real.buffer(8 * MiB, name="pool")
        real.inject("cudaHostRegister", nth=3, error=2)
        with pytest.raises(reference.RegistrationError, match="rolled back 2 of 2"):
            reference.register(getattr(real, face), int(buf.ctypes.data), buf.nbytes,
                               granularity=4096, chunk_limit=2 * MiB)
        assert real.live_registrations() == []
        assert driver.driver.live_registrations() == []
        assert [e.injected for e in real.trace.calls("cudaHostRegister")] == [False] * 2 + [True]


def test_release_all_bypasses_armed_faults() -> None:
    real, driver = stand_in()
    buf = real.buffer(4 * MiB, name="pool")
    ranges = reference.register(real.torch, int(buf.ctypes.data), buf.nbytes,
                                granularity=4096, chunk_limit=MiB)
    assert len(real.live_registrations()) == 4
    report = real.leak_report()
    assert report.startswith("4 host registration(s) still live") and "pool + 0x300000" in report
    real.inject("cudaHostUnregister", error=1, times=100)
    assert reference.teardown(real.torch, ranges)            # the armed fault bites
    assert len(driver.driver.live_registrations()) == 4
    released = real.release_all()
    assert [code for _, code in released] == [0] * 4
    assert driver.driver.live_registrations() == [] and real.leak_report() == ""


def test_context_manager_releases_what_a_test_leaked() -> None:
    real, driver = stand_in()
    with real:
        buf = real.buffer(MiB)
        real.runtime.cudaHostRegister(buf.ctypes.data, MiB, 0)
    assert driver.driver.live_registrations() == []


def test_live_from_trace_counts_only_real_successes() -> None:
    real, _ = stand_in()
    arr = real.buffer(3 * MiB)
    base = int(arr.ctypes.data)
    real.runtime.cudaHostRegister(arr, MiB, 0)                 # a buffer object as pointer
    real.runtime.cudaHostRegister(base + MiB, MiB, 1)
    real.runtime.cudaHostRegister(base, MiB, 0)                # 712: not live twice
    real.inject("cudaHostUnregister", nth=1, error=1)
    real.runtime.cudaHostUnregister(base + MiB)                # injected: still live
    assert live_from_trace(real.trace) == [(base, MiB, 0), (base + MiB, MiB, 1)]
    real.runtime.cudaHostUnregister(base + MiB)
    assert live_from_trace(real.trace) == [(base, MiB, 0)]
    real.release_all()


def test_an_injected_batch_failure_has_the_bindings_arity() -> None:
    # docs/cuda-runtime.md §5.3: 12.x returns (err, failIdx) with failIdx None on error; 13.x
    # returns (err,)
    for major, arity in ((12, 2), (13, 1)):
        fake = FakeCuda()
        face = _BindingsModule(fake.runtime._kvreg_target, major)
        real = RealCuda(runtime_module=face, profile=fake.profile)
        real.inject("cudaMemcpyBatchAsync", error=1)
        res = real.runtime.cudaMemcpyBatchAsync([1], [2], [3], 1, [], [], 0, 0)
        assert len(res) == arity and int(res[0]) == 1
        assert all(v is None for v in res[1:])


def test_buffers_are_prefaulted_page_aligned_and_forgettable() -> None:
    real = RealCuda()
    buf = real.buffer(3 * 4096 + 5, fill=7)
    assert buf.ctypes.data % 4096 == 0 and buf.nbytes == 3 * 4096 + 5
    assert np.all(buf == 7)
    assert real.space.owner(int(buf.ctypes.data)) is not None
    real.forget(buf)
    assert real.space.owner(int(buf.ctypes.data)) is None
