"""The recorder in front of the faces, and the patch helpers
(ARCHITECTURE.md#one-scenario-one-way)."""

from __future__ import annotations

import sys

import pytest
import torch

from kvreg.fakes.cuda.fake_cuda import FakeCuda
from kvreg.fakes.doors import door_target
from kvreg.fakes.patching import patch_cuda_bindings, patch_torch_cudart

GiB = 1 << 30


def test_trace_names_pointers_by_buffer_and_offset() -> None:
    fake = FakeCuda()
    buf = fake.virtual(4 * GiB, name="mla_pool")
    fake.torch.cudaHostRegister(buf.data_ptr() + GiB, GiB, 0)
    fake.torch.cudaHostRegister(buf.data_ptr() + GiB, GiB, 0)
    text = fake.trace.format()
    assert "torch.cudaHostRegister(mla_pool+0x40000000, 0x40000000, 0) -> 0 cudaSuccess" in text
    assert "-> 712 cudaErrorHostMemoryAlreadyRegistered" in text
    assert fake.trace.args("cudaHostRegister") == [(buf.data_ptr() + GiB, GiB, 0)] * 2
    fake.torch.cudaHostUnregister(buf.data_ptr() + GiB)


def test_trace_records_both_faces_in_order() -> None:
    fake = FakeCuda()
    buf = fake.virtual(GiB)
    fake.torch.cudaHostRegister(buf.data_ptr(), 4096, 0)
    fake.runtime.cudaHostUnregister(buf.data_ptr())
    entries = list(fake.trace)
    assert [(e.face, e.api, e.code) for e in entries] == [
        ("torch", "cudaHostRegister", 0), ("cuda", "cudaHostUnregister", 0)]
    assert entries[0].seq < entries[1].seq


def test_leak_report_names_the_buffer() -> None:
    fake = FakeCuda()
    buf = fake.virtual(2 * GiB, name="kv_buffer")
    fake.torch.cudaHostRegister(buf.data_ptr() + GiB, GiB, 0)
    live = fake.live_registrations()
    assert [(r.buffer, r.offset, r.size) for r in live] == [("kv_buffer", GiB, GiB)]
    assert "kv_buffer + 0x40000000" in fake.leak_report()
    fake.torch.cudaHostUnregister(buf.data_ptr() + GiB)
    assert fake.leak_report() == ""


def test_patch_torch_restores_cpu_torch_behaviour() -> None:
    fake = FakeCuda()
    before = torch.cuda.cudart
    with fake.patch():
        assert door_target(torch.cuda.cudart()) is fake.torch
        # check_error reads the module global _cudart (docs/cuda-runtime.md §7)
        with pytest.raises(torch.cuda.CudaError, match="invalid argument"):
            torch.cuda.check_error(torch.cuda.cudart().cudaHostRegister(0, 0, 0))
    assert torch.cuda.cudart is before
    if not torch.cuda.is_available():
        # docs/cuda-runtime.md §7 CPU-only build row: AssertionError again once the fake is gone
        with pytest.raises(AssertionError):
            torch.cuda.cudart()


def test_patch_restores_even_when_the_block_raises() -> None:
    fake = FakeCuda()
    before = torch.cuda.cudart
    had = "cuda.bindings.runtime" in sys.modules
    with pytest.raises(RuntimeError), fake.patch():
        raise RuntimeError("boom")
    assert torch.cuda.cudart is before
    assert ("cuda.bindings.runtime" in sys.modules) == had
    if had:
        assert sys.modules["cuda.bindings.runtime"] is not fake.runtime


def test_patch_cuda_bindings_import_forms() -> None:
    fake = FakeCuda()
    with fake.patch():
        import cuda.bindings.runtime as b
        from cuda.bindings import runtime as a

        assert door_target(a) is fake.runtime and door_target(b) is fake.runtime
    from cuda.bindings import runtime as c
    assert c is not fake.runtime


def test_patch_cuda_bindings_without_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    # simulate a machine without cuda-bindings: stand-in packages appear only for the block
    for name in ("cuda", "cuda.bindings", "cuda.bindings.runtime"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    import builtins
    real_import = builtins.__import__

    def no_cuda(name: str, *args: object, **kw: object) -> object:
        if name == "cuda" or name.startswith("cuda."):
            raise ImportError("no cuda-bindings")
        return real_import(name, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", no_cuda)
    fake = FakeCuda(use_real_types=False)
    with patch_cuda_bindings(fake.runtime):
        assert door_target(sys.modules["cuda.bindings.runtime"]) is fake.runtime
        assert door_target(sys.modules["cuda.bindings"].runtime) is fake.runtime  # type: ignore[attr-defined]
    assert "cuda.bindings.runtime" not in sys.modules
    assert "cuda" not in sys.modules


def test_legacy_cuda_cudart_path_on_12x_profile() -> None:
    fake = FakeCuda("h100-r575")
    with fake.patch():
        assert door_target(sys.modules["cuda.cudart"]) is fake.runtime
    assert sys.modules.get("cuda.cudart") is not fake.runtime


def test_patch_torch_yields_whether_torch_was_patched() -> None:
    fake = FakeCuda()
    with patch_torch_cudart(fake.torch) as patched:
        assert patched is True


def test_two_fakes_are_independent() -> None:
    a, b = FakeCuda(), FakeCuda()
    ba = a.virtual(GiB)
    bb = b.track(ba, name="same")          # the same address, as in a separate process
    assert a.torch.cudaHostRegister(ba.data_ptr(), GiB, 0) == 0
    assert b.torch.cudaHostRegister(bb.data_ptr(), GiB, 0) == 0  # no cross-talk
    a.inject("cudaHostUnregister", nth=1, error=713)
    assert b.torch.cudaHostUnregister(bb.data_ptr()) == 0
    assert a.torch.cudaHostUnregister(ba.data_ptr()) == 713
    assert a.torch.cudaHostUnregister(ba.data_ptr()) == 0


@pytest.mark.parametrize("profile,message", [
    ("no-driver", "Found no NVIDIA driver"), ("no-gpu", "No CUDA GPUs are available")])
def test_torch_init_errors_under_env_profiles(profile: str, message: str) -> None:
    # docs/cuda-runtime.md §7: a CUDA build of torch without a usable GPU raises RuntimeError
    fake = FakeCuda(profile)
    with fake.patch():
        assert torch.cuda.is_available() is False and torch.cuda.device_count() == 0
        with pytest.raises(RuntimeError, match=message):
            torch.cuda.cudart()
        # cuda-python still answers with the init error code (docs/cuda-runtime.md §2.2, §9)
        from cuda.bindings import runtime

        assert int(runtime.cudaGetDeviceCount()[0]) in (35, 100)


def test_torch_reports_the_fake_gpu_when_the_profile_has_one() -> None:
    fake = FakeCuda()
    with fake.patch():
        assert torch.cuda.is_available() is True and torch.cuda.device_count() == 1
