"""Four doors to one driver: torch, cuda-python, ctypes libcudart, the driver API.

docs/cuda-runtime.md §6: "Registrations are driver-level and shared by all runtimes in the
process ... a duplicate made through the other binding should give 712" [INF], while each
runtime instance keeps its own per-thread last-error slot [DOC], and the driver API touches
no runtime error state (local-inference-lab/vllm PR #217) [OBS-ext]. Also runs the two
example implementations of ``examples/runtime_doors`` (ctypes, as current vLLM does, and
the driver API) directly under ``fake.patch()`` over bundled pool geometries.
"""

from __future__ import annotations

import ctypes
import importlib.util
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvreg.fakes.cuda.fake_cuda import FakeCuda

ROOT = Path(__file__).resolve().parents[2]
MiB, GiB = 1 << 20, 1 << 30
DOORS = ("torch", "cuda-python", "ctypes", "driver")


def _doors(fake: FakeCuda) -> dict[str, tuple[Callable[[int, int], int],
                                              Callable[[int], int], Callable[[], int] | None]]:
    """door -> (register, unregister, peek at that door's last error or None)."""
    # the unversioned name is the system libcudart, a file apart from torch's: another
    # runtime instance (docs/cuda-runtime.md §6.1; libcudart.so.13 would be torch's own)
    lib = fake.load_libcudart("libcudart.so")
    lib.cudaHostRegister.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
    lib.cudaHostUnregister.argtypes = [ctypes.c_void_p]
    drv = fake.driver_api
    assert int(drv.cuInit(0)[0]) == 0
    # driver memory calls need a current context (docs/cuda-runtime.md §13)
    err, ctx = drv.cuDevicePrimaryCtxRetain(0)
    assert int(err) == 0 and int(drv.cuCtxSetCurrent(ctx)[0]) == 0
    return {
        "torch": (lambda p, n: int(fake.torch.cudaHostRegister(p, n, 0)),
                  lambda p: int(fake.torch.cudaHostUnregister(p)),
                  fake.torch_runtime.peek_at_last_error),
        "cuda-python": (lambda p, n: int(fake.runtime.cudaHostRegister(p, n, 0)[0]),
                        lambda p: int(fake.runtime.cudaHostUnregister(p)[0]),
                        lambda: int(fake.runtime.cudaPeekAtLastError()[0])),
        "ctypes": (lambda p, n: int(lib.cudaHostRegister(p, n, 0)),
                   lambda p: int(lib.cudaHostUnregister(p)),
                   lambda: int(lib.cudaPeekAtLastError())),
        "driver": (lambda p, n: int(drv.cuMemHostRegister(p, n, 0)[0]),
                   lambda p: int(drv.cuMemHostUnregister(p)[0]), None),
    }


def _slots(fake: FakeCuda) -> dict[str, int]:
    return {r.name: r.peek_at_last_error()
            for r in (fake.torch_runtime, fake.cuda_runtime, fake.libcudart_runtime)}


@settings(max_examples=40, deadline=None)
@given(first=st.sampled_from(DOORS), second=st.sampled_from(DOORS),
       offset=st.integers(0, MiB - 1), size=st.integers(1, MiB))
def test_a_registration_through_one_door_is_seen_by_every_other(
        first: str, second: str, offset: int, size: int) -> None:
    fake = FakeCuda()
    base = fake.virtual(2 * MiB).data_ptr()
    doors = _doors(fake)
    assert doors[first][0](base, MiB) == 0
    # an overlapping range through any door: 712, charged to that door's runtime only
    assert doors[second][0](base + offset, size) == 712
    expected = {"torch": 0, "cuda-bindings": 0, "libcudart": 0}
    name = {"torch": "torch", "cuda-python": "cuda-bindings", "ctypes": "libcudart"}.get(second)
    if name is not None:
        expected[name] = 712
    assert _slots(fake) == expected
    # the pointer query of cuda-python sees it too (docs/cuda-runtime.md §4: type Host)
    err, attrs = fake.runtime.cudaPointerGetAttributes(base + offset)
    assert int(err) == 0 and int(attrs.type) == 1
    # any door can release it, once
    assert doors[second][1](base) == 0
    assert doors[first][1](base) == 713
    assert fake.live_registrations() == []


def test_each_runtime_keeps_its_own_last_error_slot() -> None:
    fake = FakeCuda()
    base = fake.virtual(MiB).data_ptr()
    doors = _doors(fake)
    for door in ("torch", "cuda-python", "ctypes", "driver"):
        assert doors[door][0](base, 0) == 1           # size 0 -> 1 (docs/cuda-runtime.md §2.2)
    assert _slots(fake) == {"torch": 1, "cuda-bindings": 1, "libcudart": 1}
    # draining one runtime leaves the others pending (docs/cuda-runtime.md §6)
    assert int(fake.runtime.cudaGetLastError()[0]) == 1
    assert _slots(fake) == {"torch": 1, "cuda-bindings": 0, "libcudart": 1}


def _example(name: str) -> ModuleType:
    path = ROOT / "examples" / "runtime_doors" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"kvreg_example_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


EXAMPLES = ["ctypes_register", "driver_register"]


def _bundled(limit: int = 24) -> list[Any]:
    from kvreg.harness.scenario import load_paths

    cuda = [s for s in load_paths() if s.target != "mooncake" and s.expect == "success"
            and not s.faults and not s.empty]
    step = max(1, len(cuda) // limit)
    return cuda[::step][:limit]


@pytest.mark.parametrize("example", EXAMPLES)
@pytest.mark.parametrize("sc", _bundled(), ids=lambda s: s.id)
def test_example_registers_pool_buffers_all_or_nothing(example: str, sc: Any) -> None:
    from kvreg.harness.plan.chunking import reference_unit
    from kvreg.harness.pools.buffers import allocate

    mod = _example(example)
    fake = FakeCuda(sc.profile)
    geometry = sc.geometry()
    buffers = allocate(geometry, fake.space)
    families = geometry.extent_families() if geometry.has_page_meta else None
    handles = []
    with fake.patch():
        for i, spec in enumerate(geometry.buffers()):
            if not spec.cuda_registered:
                continue
            unit = spec.granularity or reference_unit(spec, sc.chunk_limit, families, i)[0]
            ptr = int(buffers[i].data_ptr())
            ranges = mod.register(ptr, spec.nbytes, granularity=unit, chunk_limit=sc.chunk_limit)
            # exact cover, every seam on the copy unit, no chunk above the limit
            assert sum(s for _, s in ranges) == spec.nbytes and ranges[0][0] == ptr
            assert all(s <= sc.chunk_limit for _, s in ranges)
            assert all((b - ptr) % unit == 0 for b, _ in ranges)
            handles.append(ranges)
        live = {(r.base, r.size) for r in fake.live_registrations()}
        assert live == {r for ranges in handles for r in ranges}
        for ranges in reversed(handles):
            mod.teardown(ranges)
        calls = len(fake.trace)
        for ranges in reversed(handles):
            mod.teardown(ranges)                    # a second teardown makes no calls
        assert len(fake.trace) == calls
    assert fake.live_registrations() == []
    assert _slots(fake) == {"torch": 0, "cuda-bindings": 0, "libcudart": 0}


@pytest.mark.parametrize("example", EXAMPLES)
@pytest.mark.parametrize("nth", [1, 2, 3])
def test_example_rolls_back_on_failure(example: str, nth: int) -> None:
    mod = _example(example)
    fake = FakeCuda()
    buf = fake.virtual(3 * GiB + 5 * MiB, name="pool")
    fake.inject("cudaHostRegister", nth=nth, error=2)
    with fake.patch(), pytest.raises(mod.CudaRegistrationError, match="rc=2"):
        mod.register(buf.data_ptr(), buf.nbytes, granularity=2 * MiB, chunk_limit=GiB)
    assert fake.live_registrations() == []
    # the ctypes example drains on its own handle; the driver API never sets an error
    assert _slots(fake) == {"torch": 0, "cuda-bindings": 0, "libcudart": 0}


@pytest.mark.parametrize("example", EXAMPLES)
def test_example_rejects_an_impossible_granularity_before_any_call(example: str) -> None:
    mod = _example(example)
    fake = FakeCuda()
    buf = fake.virtual(4 * GiB)
    with fake.patch(), pytest.raises(ValueError, match="does not fit"):
        mod.register(buf.data_ptr(), buf.nbytes, granularity=3 * GiB, chunk_limit=2 * GiB)
    assert len(fake.trace) == 0


def test_ctypes_example_reports_the_runtime_name_of_the_error() -> None:
    mod = _example("ctypes_register")
    fake = FakeCuda()
    buf = fake.virtual(2 * GiB)
    with fake.patch():
        first = mod.register(buf.data_ptr(), GiB, granularity=MiB, chunk_limit=GiB)
        with pytest.raises(mod.CudaRegistrationError,
                           match=r"cudaErrorHostMemoryAlreadyRegistered \(rc=712\)"):
            mod.register(buf.data_ptr(), 2 * GiB, granularity=MiB, chunk_limit=GiB)
        assert fake.libcudart_runtime.peek_at_last_error() == 0
        mod.teardown(first)
    assert [e.face for e in fake.trace.calls("cudaHostRegister")] == ["ctypes"] * 2


def test_driver_example_over_a_512_gib_ceiling() -> None:
    # docs/cuda-runtime.md §2.2: a single call of 512 GiB or more -> 2 on R580+; chunking below it
    # succeeds
    mod = _example("driver_register")
    fake = FakeCuda()
    buf = fake.virtual(600 * GiB)
    with fake.patch():
        with pytest.raises(mod.CudaRegistrationError, match="CUDA_ERROR_OUT_OF_MEMORY"):
            mod.register(buf.data_ptr(), buf.nbytes, granularity=MiB, chunk_limit=600 * GiB)
        ranges = mod.register(buf.data_ptr(), buf.nbytes, granularity=MiB,
                              chunk_limit=256 * GiB)
        assert [s for _, s in ranges] == [256 * GiB, 256 * GiB, 88 * GiB]
        mod.teardown(ranges)
    assert fake.live_registrations() == []


def test_a_patched_in_package_has_a_spec_as_an_installed_one_does() -> None:
    """SGLang's Mooncake KV manager asks ``importlib.util.find_spec("nixl")`` whether the
    optional transport is installed; a module in sys.modules without a spec makes it raise
    ValueError ("nixl.__spec__ is None") instead of answering."""
    import importlib.util

    from kvreg.fakes.mooncake import FakeMooncake
    from kvreg.fakes.nixl import FakeNixl

    with FakeNixl().patch():
        spec = importlib.util.find_spec("nixl")
        assert spec is not None and spec.name == "nixl"
        assert spec.submodule_search_locations == []
        sub = importlib.util.find_spec("nixl._api")
        assert sub is not None and sub.submodule_search_locations is None
    with FakeMooncake().patch():
        found = importlib.util.find_spec("mooncake.engine")
        assert found is not None and found.name == "mooncake.engine"
