"""The cuda-python face's surface: dir()/hasattr parity, pass-through helpers, the real module.

Feature probes decide what to call by reading ``dir(runtime)`` and ``hasattr`` (cuda-python's
own test suite asks whether a name is in ``dir()`` before calling it), so the fake must list
every name the real ``cuda.bindings.runtime`` lists, modelled or not (docs/cuda-runtime.md §9
module paths; ARCHITECTURE.md#the-fakes-rules: an API the fake does not implement
raises, it never returns success silently).
"""

from __future__ import annotations

import ctypes
import sys

import pytest

from kvreg.fakes.cuda import symbols
from kvreg.fakes.cuda.cuda_python_face import NotModelledError
from kvreg.fakes.cuda.fake_cuda import FakeCuda
from kvreg.fakes.doors import door_target


def _public(module: object) -> set[str]:
    return {n for n in dir(module) if not n.startswith("_")}


def test_dir_lists_every_snapshot_name_before_any_call() -> None:
    # a fresh fake: nothing called yet, so no name can have been cached by a first call
    fake = FakeCuda()
    listed = set(dir(fake.runtime))
    # the installed module's names where cuda-bindings is installed (any release of the range
    # pyproject.toml declares), the committed snapshot's without it
    assert set(symbols.public_names("runtime")) <= listed
    if symbols.live_names("runtime") is None:
        assert set(symbols.snapshot_names("runtime")) <= listed
    assert {"cudaMalloc", "cudaMemcpy2D", "cudaHostRegister", "cudaDeviceAttr",
            "make_cudaExtent"} <= listed


def test_supports_cuda_api_style_probe_says_true_for_unmodelled_names() -> None:
    # the probe style of cuda-python's tests: `name in dir(module)`
    rt = FakeCuda().runtime

    def supports(name: str) -> bool:
        return name in dir(rt)

    assert supports("cudaMalloc") and supports("cudaMemcpy3DPeer")
    assert not supports("cudaNoSuchApi")
    assert not hasattr(rt, "cudaNoSuchApi")


def test_hasattr_is_true_for_every_real_name_and_never_raises() -> None:
    rt = FakeCuda().runtime
    for name in symbols.public_names("runtime"):
        assert hasattr(rt, name), name


def test_dir_and_hasattr_parity_with_the_installed_module() -> None:
    real = pytest.importorskip("cuda.bindings.runtime", reason="cuda-bindings is not installed")
    fake = FakeCuda()
    assert _public(fake.runtime) == _public(real)
    for name in _public(real):
        assert hasattr(fake.runtime, name) == hasattr(real, name)


def test_snapshot_matches_the_installed_module() -> None:
    pytest.importorskip("cuda.bindings.runtime", reason="cuda-bindings is not installed")
    from importlib import metadata

    version = metadata.version("cuda-bindings")
    if version not in symbols.snapshot_header():
        pytest.skip(f"snapshot is of {symbols.snapshot_header()}; installed {version}")
    for which in ("runtime", "driver"):
        assert symbols.snapshot_names(which) == symbols.live_names(which)  # type: ignore[arg-type]


@pytest.mark.parametrize("call", [
    lambda rt: rt.make_cudaExtent(4, 5, 6).depth == 6,
    lambda rt: rt.make_cudaPos(1, 2, 3).z == 3,
    lambda rt: rt.make_cudaPitchedPtr(0, 512, 128, 4).pitch == 512,
    lambda rt: rt.sizeof(rt.cudaExtent) == 24,
    lambda rt: rt.cudaCreateChannelDesc(
        8, 0, 0, 0, rt.cudaChannelFormatKind.cudaChannelFormatKindUnsigned)[1].x == 8,
], ids=["make_cudaExtent", "make_cudaPos", "make_cudaPitchedPtr", "sizeof",
        "cudaCreateChannelDesc"])
def test_host_only_helpers_pass_through(call: object) -> None:
    # host-only helpers need no driver: the real binding answers (no NotModelledError)
    real = pytest.importorskip("cuda.bindings.runtime", reason="cuda-bindings is not installed")
    fake = FakeCuda()
    assert call(fake.runtime)  # type: ignore[operator]
    assert call(real)          # type: ignore[operator]


def test_pass_through_answers_as_the_real_binding() -> None:
    real = pytest.importorskip("cuda.bindings.runtime", reason="cuda-bindings is not installed")
    rt = FakeCuda().runtime
    assert rt.make_cudaExtent is real.make_cudaExtent


@pytest.mark.parametrize("profile", ["h100-r575", "no-driver"])   # 12090: not the wheel's 13000
def test_local_runtime_version_is_the_fake_libcudarts_under_patch(profile: str) -> None:
    # Found by cuda-python's own tests (docs/peer-suites.md): passed through, the real helper
    # dlopens libcudart through cuda.pathfinder, whose RTLD_NOLOAD probe gets the fake's
    # library with no dlopen handle and crashes on "dlinfo returned NULL link_map pointer".
    # It answers as the libcudart a ctypes load gives (cudaRuntimeGetVersion needs no driver).
    fake = FakeCuda(profile)
    with fake.patch():
        from cuda.bindings import runtime

        err, version = runtime.getLocalRuntimeVersion()
        lib = fake.load_libcudart(fake.libcudart_soname)
        out = ctypes.c_int(0)
        assert int(lib.cudaRuntimeGetVersion(ctypes.byref(out))) == 0
    assert (int(err), version) == (0, out.value)
    assert version == fake.profile.runtime_version


def test_unmodelled_call_raises_and_changes_nothing() -> None:
    fake = FakeCuda()
    base = fake.virtual(1 << 20).data_ptr()
    assert int(fake.runtime.cudaHostRegister(base, 4096, 0)[0]) == 0
    with pytest.raises(NotModelledError, match=r"cudaMemcpy2D .*COVERAGE\.md"):
        fake.runtime.cudaMemcpy2D(base, 0, base, 0, 16, 1, 0)
    assert [r.base for r in fake.live_registrations()] == [base]
    assert fake.trace.codes("cudaMemcpy2D") == []
    fake.runtime.cudaHostUnregister(base)


def test_fake_built_under_another_fakes_patch_uses_the_real_module() -> None:
    real = pytest.importorskip("cuda.bindings.runtime", reason="cuda-bindings is not installed")
    outer = FakeCuda()
    with outer.patch():
        from cuda.bindings import runtime as patched

        assert door_target(patched) is outer.runtime
        inner = FakeCuda()
        # the inner fake's types are the real binding's, not the outer fake's face
        assert inner.runtime.cudaError_t is real.cudaError_t
        assert inner.runtime.make_cudaExtent is real.make_cudaExtent
        assert symbols.real_module("runtime") is real
    assert sys.modules["cuda.bindings.runtime"] is real


def test_is_fake_module_recognises_faces_and_the_recorder() -> None:
    fake = FakeCuda()
    assert symbols.is_fake_module(fake.runtime)
    assert symbols.is_fake_module(fake.runtime._kvreg_target)
    assert not symbols.is_fake_module(sys)


def test_without_cuda_bindings_dir_lists_only_what_answers() -> None:
    # use_real_types=False stands for a machine without cuda-bindings: dir() and hasattr
    # still agree with each other, and every snapshot function is listed
    fake = FakeCuda(use_real_types=False)
    for face in (fake.runtime._kvreg_target, fake.driver_api._kvreg_target):
        face.__dict__["_real"] = None
        listed = [n for n in dir(face) if not n.startswith("_")]
        assert all(hasattr(face, n) for n in listed)
    functions = {n for n, k in symbols.snapshot_names("runtime").items() if k == "function"
                 and n.startswith("cuda")}
    assert functions <= set(dir(fake.runtime._kvreg_target))
