"""The ``cuda.bindings.runtime`` face (docs/cuda-runtime.md §9, §11.6)."""

from __future__ import annotations

import ctypes
import sys

import numpy as np
import pytest

from kvreg.fakes.cuda.cuda_python_face import NotModelledError
from kvreg.fakes.cuda.fake_cuda import FakeCuda

MiB = 1 << 20


def _real_runtime():  # type: ignore[no-untyped-def]
    return pytest.importorskip("cuda.bindings.runtime",
                               reason="cuda-bindings is not installed: no real enum to compare")


@pytest.fixture(params=[True, False], ids=["real-types", "fallback-types"])
def fake(request: pytest.FixtureRequest) -> FakeCuda:
    return FakeCuda(use_real_types=request.param)


def test_results_are_tuples_with_real_enum_members() -> None:
    # docs/cuda-runtime.md §9 "Every function returns a tuple"; "cudaError_t type: ... an int
    # subclass ... bool(cudaSuccess) is False" [OBS-local]
    real = _real_runtime()
    fake = FakeCuda()
    base = fake.virtual(MiB).data_ptr()
    ok = fake.runtime.cudaHostRegister(base, MiB, 0)
    dup = fake.runtime.cudaHostRegister(base, MiB, 0)
    assert type(ok) is tuple and len(ok) == 1
    assert type(ok[0]) is real.cudaError_t
    assert ok[0] is real.cudaError_t.cudaSuccess
    assert dup[0] is real.cudaError_t.cudaErrorHostMemoryAlreadyRegistered
    assert fake.runtime.cudaError_t is real.cudaError_t
    assert repr(dup[0]) == "<cudaError_t.cudaErrorHostMemoryAlreadyRegistered: 712>"


def test_enum_semantics(fake: FakeCuda) -> None:
    # docs/cuda-runtime.md §9 "an int subclass"; "cudaError_t.cudaSuccess == 0 is True, and
    # bool(cudaSuccess) is False"; ".name and .value work"; "cudaError_t(9999) raises
    # ValueError" [OBS-local] — for the real types and the fallback stand-ins alike
    rt = fake.runtime
    base = fake.virtual(MiB).data_ptr()
    (ok,) = rt.cudaHostRegister(base, MiB, 0)
    (dup,) = rt.cudaHostRegister(base, MiB, 0)
    assert isinstance(ok, int) and isinstance(dup, int)
    assert ok == 0 and not ok and bool(ok) is False
    assert dup == 712 and bool(dup) is True
    assert dup.name == "cudaErrorHostMemoryAlreadyRegistered" and dup.value == 712
    assert ok is rt.cudaError_t.cudaSuccess
    with pytest.raises(ValueError):
        rt.cudaError_t(9999)


def test_output_slots_are_none_on_error(fake: FakeCuda) -> None:
    # docs/cuda-runtime.md §9 "On error the output slots are None" [OBS-local]
    rt = fake.runtime
    unreg = fake.virtual(MiB).data_ptr()
    err, dev = rt.cudaHostGetDevicePointer(unreg, 0)
    assert int(err) == 1 and dev is None
    err, flags = rt.cudaHostGetFlags(unreg)
    assert int(err) == 1 and flags is None
    err, attr = rt.cudaDeviceGetAttribute(91, 7)
    assert int(err) == 101 and attr is None
    err, host = rt.cudaHostAlloc(MiB, 0x80)
    assert int(err) == 1 and host is None


def test_success_outputs_are_filled(fake: FakeCuda) -> None:
    # docs/cuda-runtime.md §9 "(err, value) ... otherwise" [OBS-local]
    rt = fake.runtime
    err, n = rt.cudaGetDeviceCount()
    assert not err and n == 1
    err, dev = rt.cudaMalloc(MiB)
    assert not err and isinstance(dev, int) and dev
    err, attrs = rt.cudaPointerGetAttributes(dev)
    assert not err and int(attrs.type) == 2
    err, free, total = rt.cudaMemGetInfo()
    assert not err and free + MiB <= total


def test_flag_constants_are_plain_ints() -> None:
    # docs/cuda-runtime.md §9 "Flag constants are plain ints: cudaHostRegisterDefault through
    # cudaHostRegisterReadOnly are 0, 1, 2, 4, 8" [OBS-local]
    rt = FakeCuda().runtime
    names = ["cudaHostRegisterDefault", "cudaHostRegisterPortable", "cudaHostRegisterMapped",
             "cudaHostRegisterIoMemory", "cudaHostRegisterReadOnly"]
    assert [getattr(rt, n) for n in names] == [0, 1, 2, 4, 8]
    assert all(type(getattr(rt, n)) is int for n in names)
    if _has_bindings():
        from cuda.bindings import runtime as real
        assert [int(getattr(real, n)) for n in names] == [0, 1, 2, 4, 8]


def _has_bindings() -> bool:
    try:
        import cuda.bindings.runtime  # noqa: F401
    except ImportError:
        return False
    return True


# -- lenient conversion (docs/cuda-runtime.md §9) --------------------------------------------------

def test_none_pointer_is_null(fake: FakeCuda) -> None:
    # docs/cuda-runtime.md §9 "ptr accepts ... None (taken as NULL)" [OBS-local]; §2.2 NULL -> 1
    assert int(fake.runtime.cudaHostRegister(None, MiB, 0)[0]) == 1
    assert fake.live_registrations() == []


def test_bytearray_and_numpy_give_their_address(fake: FakeCuda) -> None:
    # docs/cuda-runtime.md §9 "ptr accepts ... buffer-protocol objects (bytearray, bytes, numpy)"
    # [OBS-local]
    rt = fake.runtime
    ba = bytearray(8192)
    ba_addr = np.frombuffer(ba, np.uint8).ctypes.data
    arr = np.zeros(4096, np.uint8)
    assert int(rt.cudaHostRegister(ba, len(ba), 0)[0]) == 0
    assert int(rt.cudaHostRegister(arr, arr.nbytes, 0)[0]) == 0
    assert sorted(r.base for r in fake.live_registrations()) == sorted([ba_addr, arr.ctypes.data])
    # the same memory by int address overlaps
    assert int(rt.cudaHostRegister(ba_addr + 10, 10, 0)[0]) == 712
    assert int(rt.cudaHostUnregister(arr.ctypes.data)[0]) == 0
    assert int(rt.cudaHostUnregister(ba)[0]) == 0


def test_ctypes_void_p_and_float_pointer(fake: FakeCuda) -> None:
    # docs/cuda-runtime.md §9 "ctypes.c_void_p, and even a float" [OBS-local]
    rt = fake.runtime
    base = fake.virtual(MiB).data_ptr()
    assert int(rt.cudaHostRegister(ctypes.c_void_p(base), 4096, 0)[0]) == 0
    assert int(rt.cudaHostRegister(float(base + 8192), 4096, 0)[0]) == 0   # exact as a float
    assert [r.base for r in fake.live_registrations()] == [base, base + 8192]


def test_float_size_and_flags_are_accepted(fake: FakeCuda) -> None:
    # docs/cuda-runtime.md §9 "Floats are accepted; NVIDIA's own test passes 160.0"; "flags: ...
    # floats are accepted" [OBS-local]
    rt = fake.runtime
    base = fake.virtual(MiB).data_ptr()
    assert int(rt.cudaHostRegister(base, 160.0, 3.0)[0]) == 0
    assert [(r.size, r.flags) for r in fake.live_registrations()] == [(160, 3)]


@pytest.mark.parametrize("ptr", ["0x1000", -1, 1 << 64, object()])
def test_bad_pointer_raises_type_error(fake: FakeCuda, ptr: object) -> None:
    # docs/cuda-runtime.md §9 "ptr rejects str, negative ints and ints of 2^64 or more with
    # TypeError" [OBS-local]
    with pytest.raises(TypeError, match="expected Type None, int or object with Buffer Protocol"):
        fake.runtime.cudaHostRegister(ptr, 4096, 0)


@pytest.mark.parametrize(("size", "flags"), [(-1, 0), (1 << 64, 0), (4096, -1), (4096, 1 << 32)])
def test_bad_size_or_flags_raise_overflow_error(fake: FakeCuda, size: int, flags: int) -> None:
    # docs/cuda-runtime.md §9 "size (size_t): negative values give OverflowError and values of
    # 2^64 or more give OverflowError"; "flags: negative values give OverflowError" [OBS-local]
    with pytest.raises(OverflowError):
        fake.runtime.cudaHostRegister(fake.virtual(4096).data_ptr(), size, flags)
    assert fake.live_registrations() == []


def test_error_strings_accept_int_and_enum(fake: FakeCuda) -> None:
    # docs/cuda-runtime.md §9 "accept a cudaError_t or a plain int" [OBS-local]
    rt = fake.runtime
    a = rt.cudaGetErrorString(712)
    b = rt.cudaGetErrorString(rt.cudaError_t(712))
    assert a == b and isinstance(a[1], bytes) and not a[0]


# -- module surface ----------------------------------------------------------------------------

def test_patch_reaches_the_face(fake: FakeCuda) -> None:
    # docs/cuda-runtime.md §9 "For code that runs on both, use from cuda.bindings import runtime"
    with fake.patch(torch=False):
        from cuda.bindings import runtime
        assert runtime is fake.runtime
        import cuda.bindings.runtime as runtime2
        assert runtime2 is fake.runtime


def test_legacy_cuda_cudart_only_for_12x() -> None:
    # docs/cuda-runtime.md §9 "The legacy cuda.cudart ... were removed in 13.0.0" [DOC]
    fake12 = FakeCuda("h100-r575")
    with fake12.patch(torch=False):
        import cuda.cudart as legacy  # type: ignore[import-not-found]
        assert legacy is fake12.runtime
    assert sys.modules.get("cuda.cudart") is not fake12.runtime


def test_unmodelled_api_raises_not_modelled() -> None:
    # docs/cuda-runtime.md §11.6: the fake models a named subset; others must not pass silently
    pytest.importorskip("cuda.bindings.runtime", reason="the real module lists the APIs")
    fake = FakeCuda()
    with pytest.raises(NotModelledError, match=r"COVERAGE\.md"):
        fake.runtime.cudaMemset(0, 0, 1)


def test_stream_handles_round_trip(fake: FakeCuda) -> None:
    # docs/cuda-runtime.md §5.3: a created stream is a valid, non-legacy stream
    rt = fake.runtime
    err, stream = rt.cudaStreamCreate()
    assert not err and int(stream) not in (0, 1, 2)
    assert int(rt.cudaStreamSynchronize(stream)[0]) == 0
    assert int(rt.cudaStreamDestroy(stream)[0]) == 0
    assert int(rt.cudaStreamSynchronize(stream)[0]) == 400
