"""The runtime instance a libcudart name loads, as glibc's dynamic loader decides it.

docs/cuda-runtime.md §6.1. glibc elf/dl-load.c ``_dl_map_object``: "If the requested name
matches the soname of a loaded object, use that object" (the name is compared with each
loaded object's names and its DT_SONAME); ``_dl_map_object_from_fd``: "Look again to see if
the real name matched another already loaded" (device and inode) [DOC]. PyPI CUDA builds of
torch load ``nvidia/cuda_runtime/lib/libcudart.so.<major>`` (``nvidia/cu13/lib`` for CUDA 13)
at import (torch/__init__.py ``_load_global_deps``) [DOC]. cuda-bindings links cudart
statically into ``cuda.bindings.runtime`` (cuda_bindings/build_hooks.py: ``cyruntime.pyx``
with ``cudart_static``) [DOC]: its instance is reachable by no name.
"""

from __future__ import annotations

import ctypes

import pytest

from kvreg.fakes.cuda.fake_cuda import FakeCuda
from kvreg.fakes.cuda.profile import PROFILES, profile_with_options

SITE = "/opt/venv/lib/python3.12/site-packages"


@pytest.mark.parametrize(("mode", "name", "torchs"), [
    # PyPI CUDA wheels: the soname, or the package's file by path
    ("shared", "libcudart.so.13", True),
    ("shared", f"{SITE}/nvidia/cu13/lib/libcudart.so.13", True),
    ("shared", f"{SITE}/nvidia/cuda_runtime/lib/libcudart.so.13", True),
    ("shared", "libcudart.so", False),                            # searched: the toolkit's file
    ("shared", "libcudart.so.13.0.96", False),                    # no loaded name or soname
    ("shared", "/usr/local/cuda/lib64/libcudart.so.13", False),   # another file
    ("shared", "libcudart.so.12", False),                         # another major
    ("shared", f"{SITE}/torch/lib/libcudart-9b3f1e2a.so.13", False),
    # older wheels: torch/lib/libcudart-<hash>.so.13 (its soname renamed with it)
    ("bundled", f"{SITE}/torch/lib/libcudart-9b3f1e2a.so.13", True),
    ("bundled", "libcudart-9b3f1e2a.so.13", True),
    ("bundled", "libcudart.so.13", False),
    # cudart linked into torch: nothing loaded is torch's runtime
    ("private", "libcudart.so.13", False),
    ("private", f"{SITE}/nvidia/cu13/lib/libcudart.so.13", False),
])
def test_which_instance_a_name_loads(mode: str, name: str, torchs: bool) -> None:
    fake = FakeCuda(profile_with_options("h200-r580", {"torch_cudart": mode}))
    assert fake.is_torch_libcudart(name) is torchs
    expected = fake.torch_runtime if torchs else fake.libcudart_runtime
    assert fake.libcudart_faces(name)[1]._kvreg_runtime is expected


def test_the_soname_follows_torchs_runtime_major() -> None:
    fake = FakeCuda("h100-r575")              # CUDA 12.9: torch loads libcudart.so.12
    assert fake.is_torch_libcudart("libcudart.so.12")
    assert not fake.is_torch_libcudart("libcudart.so.13")


def test_under_patch_a_soname_drain_clears_torchs_error_and_an_unversioned_one_does_not() -> None:
    fake = FakeCuda()
    with fake.patch():
        import torch

        cudart = torch.cuda.cudart()  # type: ignore[no-untyped-call]
        assert int(cudart.cudaHostRegister(0, 4096, 0)) == 1        # NULL -> 1, torch's slot
        other = ctypes.CDLL("libcudart.so")
        assert other.cudaGetLastError() == 0                       # another instance
        assert fake.torch_runtime.peek_at_last_error() == 1
        assert ctypes.CDLL(fake.libcudart_soname).cudaGetLastError() == 1
        assert fake.torch_runtime.peek_at_last_error() == 0


def test_cuda_bindings_runtime_is_an_instance_no_name_reaches() -> None:
    fake = FakeCuda()
    assert int(fake.runtime.cudaHostRegister(0, 4096, 0)[0]) == 1
    for name in ("libcudart.so.13", "libcudart.so"):
        assert fake.load_libcudart(name).cudaGetLastError() == 0
    assert int(fake.runtime.cudaGetLastError()[0]) == 1


def test_the_option_is_refused_with_a_value_it_does_not_take() -> None:
    with pytest.raises(ValueError, match="torch_cudart must be one of"):
        profile_with_options(PROFILES["h200-r580"], {"torch_cudart": "static"})
