"""Rejected arguments: the real faces' exception types, and no change to the fake's state.

docs/cuda-runtime.md §7 (pybind11 conversion: TypeError), §9 (cuda-python conversion: TypeError
for pointers, OverflowError for sizes and flags), §5.3 (batch lists: RuntimeError "List is too
small", TypeError for wrong element types).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kvreg.fakes.cuda.fake_cuda import FakeCuda

MiB = 1 << 20
P = 0x10000        # a pointer value used where the pointer itself is not the bad argument


def _snapshot(fake: FakeCuda) -> tuple[Any, ...]:
    """Everything a rejected call must leave alone (read without going through the faces)."""
    d = fake.driver
    return (
        [(r.base, r.size, r.flags) for r in fake.live_registrations()],
        [(p.base, p.size, p.kind) for p in d.pinned],
        len(fake.trace),
        fake.torch_runtime.peek_at_last_error(),
        fake.cuda_runtime.peek_at_last_error(),
        d.sticky_error,
        d.seq,
        sorted(d.streams),
        [(a.base, a.size) for a in d.device_ranges()],
        fake.cuda_runtime.last_copy_fault,
        [(a.base, a.size, a.kind) for a in fake.space.allocations()],
    )


def _busy_fake() -> tuple[FakeCuda, int]:
    """A fake with live state and a pending error in each runtime."""
    fake = FakeCuda()
    base = fake.virtual(8 * MiB, name="pool").data_ptr()
    assert int(fake.runtime.cudaHostRegister(base, 2 * MiB, 0)[0]) == 0
    assert fake.torch.cudaHostRegister(base + 4 * MiB, MiB, 0) == 0
    fake.runtime.cudaHostUnregister(base + 1)               # 1 pending in cuda-python's runtime
    fake.torch.cudaHostUnregister(base + 7 * MiB)           # 713 pending in torch's runtime
    fake.runtime.cudaMalloc(MiB)
    fake.runtime.cudaStreamCreate()
    return fake, base


# docs/cuda-runtime.md §7 "negative ints, ints of 2^64 or more, None and floats all raise
# TypeError for the uintptr_t and size_t parameters" [OBS-local]
TORCH_CASES: list[tuple[str, Callable[[Any, int], Any]]] = [
    ("register negative ptr", lambda t, b: t.cudaHostRegister(-4096, MiB, 0)),
    ("register huge ptr", lambda t, b: t.cudaHostRegister(1 << 64, MiB, 0)),
    ("register float ptr", lambda t, b: t.cudaHostRegister(float(b), MiB, 0)),
    ("register None ptr", lambda t, b: t.cudaHostRegister(None, MiB, 0)),
    ("register str ptr", lambda t, b: t.cudaHostRegister(hex(b), MiB, 0)),
    ("register bytearray ptr", lambda t, b: t.cudaHostRegister(bytearray(8), 8, 0)),
    ("register negative size", lambda t, b: t.cudaHostRegister(b + 3 * MiB, -1, 0)),
    ("register float size", lambda t, b: t.cudaHostRegister(b + 3 * MiB, 4096.0, 0)),
    ("register None size", lambda t, b: t.cudaHostRegister(b + 3 * MiB, None, 0)),
    ("register huge size", lambda t, b: t.cudaHostRegister(b + 3 * MiB, 1 << 64, 0)),
    ("register negative flags", lambda t, b: t.cudaHostRegister(b + 3 * MiB, 4096, -1)),
    ("register 2**32 flags", lambda t, b: t.cudaHostRegister(b + 3 * MiB, 4096, 1 << 32)),
    ("unregister negative", lambda t, b: t.cudaHostUnregister(-1)),
    ("unregister float", lambda t, b: t.cudaHostUnregister(float(b))),
    ("unregister None", lambda t, b: t.cudaHostUnregister(None)),
    ("unregister huge", lambda t, b: t.cudaHostUnregister(1 << 64)),
    ("error string of int", lambda t, b: t.cudaGetErrorString(712)),
    ("stream create negative", lambda t, b: t.cudaStreamCreate(-8)),
    ("stream destroy None", lambda t, b: t.cudaStreamDestroy(None)),
    ("mem get info float", lambda t, b: t.cudaMemGetInfo(0.0)),
]


@pytest.mark.parametrize("case", TORCH_CASES, ids=[c[0] for c in TORCH_CASES])
def test_torch_face_rejects_with_type_error_and_changes_nothing(
        case: tuple[str, Callable[[Any, int], Any]]) -> None:
    # docs/cuda-runtime.md §7 argument conversion [OBS-local]
    fake, base = _busy_fake()
    before = _snapshot(fake)
    with pytest.raises(TypeError):
        case[1](fake.torch, base)
    assert _snapshot(fake) == before


def _attrs(mod: Any) -> Any:
    a = mod.cudaMemcpyAttributes()
    a.srcAccessOrder = 1
    return a


def _batch(mod: Any, **over: Any) -> Any:
    args: dict[str, Any] = {"dsts": [P], "srcs": [P + 8192], "sizes": [4096], "count": 1,
                            "attrs": [_attrs(mod)], "attrsIdxs": [0], "numAttrs": 1,
                            "stream": 0x5000}
    args.update(over)
    if args["attrs"] == "ints":
        args["attrs"] = [1]
    return mod.cudaMemcpyBatchAsync(args["dsts"], args["srcs"], args["sizes"], args["count"],
                                    args["attrs"], args["attrsIdxs"], args["numAttrs"],
                                    args["stream"])


# (id, call on a module, expected exception type) — docs/cuda-runtime.md §9 [OBS-local] conversion
# rules and docs/cuda-runtime.md §5.3 "Python-side checks happen before the C call" [OBS-local]
CUDA_CASES: list[tuple[str, Callable[[Any], Any], type[BaseException]]] = [
    ("register str ptr", lambda m: m.cudaHostRegister("0x10000", 4096, 0), TypeError),
    ("register negative ptr", lambda m: m.cudaHostRegister(-1, 4096, 0), TypeError),
    ("register huge ptr", lambda m: m.cudaHostRegister(1 << 64, 4096, 0), TypeError),
    ("register negative float ptr", lambda m: m.cudaHostRegister(-1.0, 4096, 0), TypeError),
    ("register object ptr", lambda m: m.cudaHostRegister(object(), 4096, 0), TypeError),
    ("register negative size", lambda m: m.cudaHostRegister(P, -1, 0), OverflowError),
    ("register negative float size", lambda m: m.cudaHostRegister(P, -1.0, 0), OverflowError),
    ("register huge size", lambda m: m.cudaHostRegister(P, 1 << 64, 0), OverflowError),
    ("register str size", lambda m: m.cudaHostRegister(P, "4096", 0), TypeError),
    ("register None size", lambda m: m.cudaHostRegister(P, None, 0), TypeError),
    ("register negative flags", lambda m: m.cudaHostRegister(P, 4096, -1), OverflowError),
    ("register huge flags", lambda m: m.cudaHostRegister(P, 4096, 1 << 32), OverflowError),
    ("register None flags", lambda m: m.cudaHostRegister(P, 4096, None), TypeError),
    ("unregister negative", lambda m: m.cudaHostUnregister(-1), TypeError),
    ("unregister str", lambda m: m.cudaHostUnregister("x"), TypeError),
    ("attributes negative", lambda m: m.cudaPointerGetAttributes(-1), TypeError),
    ("device pointer negative flags", lambda m: m.cudaHostGetDevicePointer(P, -1),
     OverflowError),
    ("device pointer str", lambda m: m.cudaHostGetDevicePointer("x", 0), TypeError),
    ("get flags str", lambda m: m.cudaHostGetFlags("x"), TypeError),
    ("host alloc negative", lambda m: m.cudaHostAlloc(-1, 0), OverflowError),
    ("malloc host negative", lambda m: m.cudaMallocHost(-5), OverflowError),
    ("free host negative", lambda m: m.cudaFreeHost(-1), TypeError),
    ("malloc negative", lambda m: m.cudaMalloc(-1), OverflowError),
    ("memcpy negative count", lambda m: m.cudaMemcpyAsync(P, P, -1, 1, 0), OverflowError),
    ("memcpy str count", lambda m: m.cudaMemcpyAsync(P, P, "10", 1, 0), TypeError),
    ("memcpy str src", lambda m: m.cudaMemcpyAsync(P, "x", 10, 1, 0), TypeError),
    ("memcpy negative stream", lambda m: m.cudaMemcpyAsync(P, P, 10, 1, -1), OverflowError),
    ("memcpy huge stream", lambda m: m.cudaMemcpyAsync(P, P, 10, 1, 1 << 64), OverflowError),
    ("memcpy str stream", lambda m: m.cudaMemcpyAsync(P, P, 10, 1, "s"), TypeError),
    ("sync negative stream", lambda m: m.cudaStreamSynchronize(-1), OverflowError),
    ("sync bytearray stream", lambda m: m.cudaStreamSynchronize(bytearray(8)), TypeError),
    ("destroy negative stream", lambda m: m.cudaStreamDestroy(-1), OverflowError),
    ("batch list too small", lambda m: _batch(m, count=2), RuntimeError),
    ("batch attrsIdxs too small", lambda m: _batch(m, attrsIdxs=[]), RuntimeError),
    ("batch str dst", lambda m: _batch(m, dsts=["x"]), TypeError),
    ("batch negative src", lambda m: _batch(m, srcs=[-1]), TypeError),
    ("batch str size", lambda m: _batch(m, sizes=["3"]), TypeError),
    ("batch float size", lambda m: _batch(m, sizes=[3.5]), TypeError),
    ("batch negative size", lambda m: _batch(m, sizes=[-3]), OverflowError),
    ("batch huge size", lambda m: _batch(m, sizes=[1 << 64]), OverflowError),
    ("batch int attrs", lambda m: _batch(m, attrs="ints"), TypeError),
    ("batch str attrsIdx", lambda m: _batch(m, attrsIdxs=["0"]), TypeError),
    ("batch negative attrsIdx", lambda m: _batch(m, attrsIdxs=[-1]), OverflowError),
    ("batch negative count", lambda m: _batch(m, count=-1), OverflowError),
    ("batch negative stream", lambda m: _batch(m, stream=-1), OverflowError),
    ("batch str stream", lambda m: _batch(m, stream="s"), TypeError),
]


@pytest.mark.parametrize("case", CUDA_CASES, ids=[c[0] for c in CUDA_CASES])
def test_cuda_python_face_rejects_and_changes_nothing(
        case: tuple[str, Callable[[Any], Any], type[BaseException]]) -> None:
    # docs/cuda-runtime.md §9 argument conversion [OBS-local]; §5.3 Python-side checks
    fake, _ = _busy_fake()
    before = _snapshot(fake)
    with pytest.raises(case[2]):
        case[1](fake.runtime)
    assert _snapshot(fake) == before


@pytest.mark.parametrize("use_real_types", [True, False], ids=["real-types", "fallback-types"])
def test_fallback_types_reject_the_same_way(use_real_types: bool) -> None:
    # docs/cuda-runtime.md §9: the fallback types must not change conversion behaviour
    fake = FakeCuda(use_real_types=use_real_types)
    for _, call, exc in CUDA_CASES:
        with pytest.raises(exc):
            call(fake.runtime)


@pytest.fixture(scope="module")
def real_runtime() -> Any:
    runtime = pytest.importorskip(
        "cuda.bindings.runtime", reason="cuda-bindings is not installed: nothing to compare with")
    err, _ = runtime.cudaGetDeviceCount()
    if int(err) != 35:
        pytest.skip("a CUDA driver is present: calling the real binding with bogus pointers is "
                    "only safe where every call stops at 35")
    return runtime


@pytest.mark.parametrize("case", CUDA_CASES, ids=[c[0] for c in CUDA_CASES])
def test_same_exception_type_as_the_real_binding(
        real_runtime: Any, case: tuple[str, Callable[[Any], Any], type[BaseException]]) -> None:
    # docs/cuda-runtime.md §9 [OBS-local]: the fake's conversions are the binding's; the real
    # binding converts before it reaches the (absent) driver, so it is its own oracle
    with pytest.raises(case[2]):
        case[1](real_runtime)


# (id, call, expected result code) for inputs the real binding accepts — docs/cuda-runtime.md §9
# "accepts
# several of these" [OBS-local]
ACCEPTED: list[tuple[str, Callable[[Any], Any]]] = [
    ("float ptr", lambda m: m.cudaHostRegister(float(P), 4096, 0)),
    ("None ptr", lambda m: m.cudaHostRegister(None, 4096, 0)),
    ("float size", lambda m: m.cudaHostRegister(P, 160.0, 0)),
    ("float flags", lambda m: m.cudaHostRegister(P, 4096, 1.0)),
    ("bytes ptr", lambda m: m.cudaHostRegister(b"abc", 3, 0)),
    ("float count", lambda m: m.cudaMemcpyAsync(P, P + 8192, 10.5, 1, 0x5000)),
    ("None stream", lambda m: m.cudaStreamSynchronize(None)),
    ("tuple lists", lambda m: _batch(m, dsts=(P,), srcs=(P + 8192,), sizes=(4096,),
                                     attrs=(_attrs(m),), attrsIdxs=(0,))),
    ("bool size", lambda m: _batch(m, sizes=[True])),
]


@pytest.mark.parametrize("case", ACCEPTED, ids=[c[0] for c in ACCEPTED])
def test_lenient_inputs_are_accepted_like_the_real_binding(
        real_runtime: Any, case: tuple[str, Callable[[Any], Any]]) -> None:
    # docs/cuda-runtime.md §9 lenient conversion [OBS-local]; with no driver both return 35
    fake = FakeCuda("no-driver")
    assert int(case[1](real_runtime)[0]) == 35
    assert int(case[1](fake.runtime)[0]) == 35


def test_armed_fault_does_not_mask_a_type_error() -> None:
    # docs/cuda-runtime.md §7 argument conversion [OBS-local]: the exception comes first
    fake = FakeCuda()
    fake.inject("cudaHostRegister", nth=1, error=1)
    with pytest.raises(TypeError):
        fake.torch.cudaHostRegister(-1, 4096, 0)
    assert fake.torch_runtime.peek_at_last_error() == 0
    # the rejected call did not use up nth=1: the next valid call gets the fault
    buf = fake.virtual(4096)
    assert fake.torch.cudaHostRegister(buf.data_ptr(), 4096, 0) == 1
    assert fake.live_registrations() == []
