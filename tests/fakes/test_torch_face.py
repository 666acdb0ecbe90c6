"""The ``torch.cuda.cudart()`` face (docs/cuda-runtime.md §7, §11.6)."""

from __future__ import annotations

import operator

import pytest

from kvreg.fakes.cuda.fake_cuda import FakeCuda

MiB = 1 << 20


@pytest.fixture
def fake() -> FakeCuda:
    return FakeCuda()


def _pair(fake: FakeCuda) -> tuple[object, object]:
    """(success result, 712 result) from real calls."""
    base = fake.virtual(MiB).data_ptr()
    ok = fake.torch.cudaHostRegister(base, MiB, 0)
    dup = fake.torch.cudaHostRegister(base, MiB, 0)
    return ok, dup


def test_results_compare_equal_to_ints(fake: FakeCuda) -> None:
    # docs/cuda-runtime.md §7 "e == 712 is True and e != cudaError.success behaves as expected"
    # [OBS-local]
    ok, dup = _pair(fake)
    assert ok == 0 and dup == 712
    assert dup != 0 and ok != 712
    assert dup != fake.torch.cudaError.success
    assert ok == fake.torch.cudaError.success
    assert dup == fake.torch.cudaError(712)


def test_results_are_always_truthy(fake: FakeCuda) -> None:
    # docs/cuda-runtime.md §7 "bool(e) is True even for success. `if err:` is a bug" [OBS-local]
    ok, dup = _pair(fake)
    assert bool(ok) is True
    assert bool(dup) is True
    assert bool(fake.torch.cudaError.success) is True


def test_value_int_index_hash(fake: FakeCuda) -> None:
    # docs/cuda-runtime.md §7 "int(e) and e.value give the code, and operator.index works";
    # "hashable, with the same hash as the int" [OBS-local]
    ok, dup = _pair(fake)
    assert dup.value == 712 and int(dup) == 712 and operator.index(dup) == 712
    assert ok.value == 0
    assert hash(dup) == hash(712)
    assert {dup: "x"}[712] == "x"


def test_not_an_int_subclass(fake: FakeCuda) -> None:
    # docs/cuda-runtime.md §7 "It is not an int subclass" [OBS-local]
    ok, dup = _pair(fake)
    assert not isinstance(dup, int)
    assert not isinstance(ok, int)
    with pytest.raises(TypeError):
        dup + 1  # type: ignore[operator]


def test_repr_str_name(fake: FakeCuda) -> None:
    # docs/cuda-runtime.md §7 "Values other than 0 are unnamed: repr gives <cudaError.???: 712>,
    # str gives cudaError.???, .name gives '???'" [OBS-local]; pytorch PR #132089
    ok, dup = _pair(fake)
    assert repr(dup) == "<cudaError.???: 712>"
    assert str(dup) == "cudaError.???"
    assert dup.name == "???"
    assert repr(ok) == "<cudaError.success: 0>"
    assert ok.name == "success"
    assert list(fake.torch.cudaError.__members__) == ["success"]


def test_canonical_checks_work(fake: FakeCuda) -> None:
    # docs/cuda-runtime.md §7 "Canonical checks seen: int(res) != 0, res.value != 0" [OBS-ext]
    ok, dup = _pair(fake)
    assert int(ok) == 0 and ok.value == 0
    assert int(dup) != 0 and dup.value != 0


def test_check_error_raises_cuda_error_under_patch(fake: FakeCuda) -> None:
    # docs/cuda-runtime.md §7 "torch.cuda.check_error(res), which raises torch.cuda.CudaError
    # with message '<error string> (<code>)'" [OBS-local]
    torch = pytest.importorskip("torch", reason="torch is not installed")
    base = fake.virtual(MiB).data_ptr()
    with fake.patch():
        cudart = torch.cuda.cudart()
        assert cudart is fake.torch
        ok = cudart.cudaHostRegister(base, MiB, 0)
        torch.cuda.check_error(ok)                          # success: no raise
        dup = cudart.cudaHostRegister(base, MiB, 0)
        with pytest.raises(torch.cuda.CudaError,
                           match="part or all of the requested memory range is already mapped"):
            torch.cuda.check_error(dup)
        assert cudart.cudaHostUnregister(base) == 0


def test_patch_is_undone(fake: FakeCuda) -> None:
    # docs/cuda-runtime.md §7 CPU-only build: torch.cuda.cudart() raises AssertionError
    # [OBS-local]; the fake must only be reachable inside fake.patch()
    torch = pytest.importorskip("torch", reason="torch is not installed")
    before = torch.cuda.cudart
    with fake.patch():
        assert torch.cuda.cudart() is fake.torch
    assert torch.cuda.cudart is before


def test_get_error_string_needs_the_enum(fake: FakeCuda) -> None:
    # docs/cuda-runtime.md §7 "a plain int raises TypeError (pybind11)"; returns str [OBS-local]
    _, dup = _pair(fake)
    assert fake.torch.cudaGetErrorString(dup) == \
        "part or all of the requested memory range is already mapped"
    assert isinstance(fake.torch.cudaGetErrorString(dup), str)
    for bad in (712, 712.0, None, "712"):
        with pytest.raises(TypeError):
            fake.torch.cudaGetErrorString(bad)


def test_cuda_error_constructor(fake: FakeCuda) -> None:
    # docs/cuda-runtime.md §7 "Usage: cudaGetErrorString(cudaError(712))" [OBS-local]
    e = fake.torch.cudaError(712)
    assert e == 712 and e.value == 712
    with pytest.raises(TypeError):
        fake.torch.cudaError(1.5)
    with pytest.raises(TypeError):
        fake.torch.cudaError("712")


@pytest.mark.parametrize(("args", "why"), [
    ((-1, MiB, 0), "negative ptr"),
    ((1 << 64, MiB, 0), "ptr >= 2**64"),
    ((4096.0, MiB, 0), "float ptr"),
    ((None, MiB, 0), "None ptr"),
    (("0x1000", MiB, 0), "str ptr"),
    ((0x1000, -1, 0), "negative size"),
    ((0x1000, 1 << 64, 0), "size >= 2**64"),
    ((0x1000, 4096.0, 0), "float size"),
    ((0x1000, None, 0), "None size"),
    ((0x1000, MiB, -1), "negative flags"),
    ((0x1000, MiB, 1 << 32), "flags >= 2**32"),
    ((0x1000, MiB, 0.0), "float flags"),
])
def test_register_argument_conversion_raises_type_error(fake: FakeCuda, args: tuple[object, ...],
                                                        why: str) -> None:
    # docs/cuda-runtime.md §7 "Argument conversion (pybind11): negative ints, ints of 2^64 or
    # more, None and floats all raise TypeError for the uintptr_t and size_t parameters"
    # [OBS-local]
    with pytest.raises(TypeError, match="incompatible function arguments"):
        fake.torch.cudaHostRegister(*args)
    assert fake.live_registrations() == [], why


@pytest.mark.parametrize("ptr", [-1, 1 << 64, 1.0, None])
def test_unregister_argument_conversion_raises_type_error(fake: FakeCuda, ptr: object) -> None:
    # docs/cuda-runtime.md §7 argument conversion row [OBS-local]
    with pytest.raises(TypeError):
        fake.torch.cudaHostUnregister(ptr)


def test_only_torchs_api_surface(fake: FakeCuda) -> None:
    # docs/cuda-runtime.md §7 contents table: no cudaPointerGetAttributes, no cudaMemcpyAsync
    # in torch._C._cudart [OBS-local]
    for name in ("cudaPointerGetAttributes", "cudaMemcpyAsync", "cudaHostAlloc",
                 "cudaGetLastError"):
        assert not hasattr(fake.torch, name)
    for name in ("cudaHostRegister", "cudaHostUnregister", "cudaGetErrorString",
                 "cudaStreamCreate", "cudaStreamDestroy", "cudaMemGetInfo",
                 "cudaProfilerStart", "cudaProfilerStop", "cudaError"):
        assert hasattr(fake.torch, name)


def test_missing_name_raises_the_modules_attribute_error(fake: FakeCuda) -> None:
    # torch._C._cudart is a plain extension module (docs/cuda-runtime.md §7 contents table)
    # [OBS-local]: a name it lacks raises the module type's own AttributeError, through
    # the recorder too
    for face in (fake.torch, fake.torch._kvreg_target):
        with pytest.raises(AttributeError,
                           match=r"^module 'torch\._C\._cudart' has no attribute "
                                 r"'cudaMemcpyAsync'$"):
            face.cudaMemcpyAsync  # noqa: B018


def test_mem_get_info_returns_tuple(fake: FakeCuda) -> None:
    # docs/cuda-runtime.md §7 "cudaMemGetInfo(device): (free, total) tuple" [OBS-local]
    free, total = fake.torch.cudaMemGetInfo(0)
    assert total == fake.profile.total_memory and 0 < free <= total


def test_stream_create_writes_the_handle_slot(fake: FakeCuda) -> None:
    # docs/cuda-runtime.md §7 "cudaStreamCreate(ptr_to_handle): the address of a cudaStream_t
    # slot" [OBS-local]
    np = pytest.importorskip("numpy")
    slot = np.zeros(1, np.uint64)
    fake.track(slot, name="slot")
    assert fake.torch.cudaStreamCreate(slot.ctypes.data) == 0
    handle = int(slot[0])
    assert handle != 0
    assert fake.torch.cudaStreamDestroy(handle) == 0
    assert fake.torch.cudaStreamDestroy(handle) == 400


def test_torch_results_are_recorded(fake: FakeCuda) -> None:
    # docs/cuda-runtime.md §7: the recorded code is the enum's value
    _pair(fake)
    assert fake.trace.codes("cudaHostRegister") == [0, 712]
    assert [e.face for e in fake.trace.calls("cudaHostRegister")] == ["torch", "torch"]
