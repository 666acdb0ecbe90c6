"""The doors (fakes/doors.py): what code keeps across fakes reaches the one patched in now.

Issue-level facts pinned here: SGLang keeps ``torch.cuda.cudart()`` in a global; vLLM's
``CudaRTLibrary`` (vllm/distributed/device_communicators/cuda_wrapper.py) keeps one
``ctypes.CDLL`` per library path in a class-level dict and sets ``argtypes``/``restype`` on
its function pointers once; cuda-python code binds ``from cuda.bindings.runtime import
cudaHostRegister`` at import. Nested patching (a session-scoped fake and a per-test one)
must work with the inner fake answering while it is patched in.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

import pytest

# torch must already be imported here: pytester's in-process runs restore sys.modules.
import torch

from kvreg.fakes.cuda.fake_cuda import FakeCuda
from kvreg.fakes.doors import StaleHandleError, door_target, retire_scope
from kvreg.fakes.mooncake import FakeMooncake
from kvreg.fakes.verbs import Fabric

GiB = 1 << 30


def _declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    lib.cudaHostRegister.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
    lib.cudaHostUnregister.argtypes = [ctypes.c_void_p]
    return lib


def _live(fake: FakeCuda) -> int:
    return len(fake.live_registrations())


def test_nested_patch_the_inner_fake_answers_then_the_outer_again() -> None:
    # issue 18 §6: FakeCuda().patch() inside another's raised "metaclass conflict"
    outer, inner = FakeCuda(), FakeCuda()
    with outer.patch():
        buf_o = outer.virtual(GiB, name="outer")
        lib = _declare(ctypes.CDLL("libcudart.so.13"))
        cudart = torch.cuda.cudart()
        from cuda.bindings.runtime import cudaHostUnregister
        with inner.patch():
            p = inner.virtual(GiB, name="inner").data_ptr()
            assert isinstance(ctypes.CDLL("libc.so.6"), ctypes.CDLL)   # others load for real
            assert int(lib.cudaHostRegister(p, 4096, 0)) == 0
            # 712 (already registered): the outer handle reached the inner fake's driver
            assert int(cudart.cudaHostRegister(p, 4096, 0)) == 712
            assert int(cudaHostUnregister(p)[0]) == 0
            assert int(lib.cudaHostRegister(p, GiB, 0)) == 0
            assert _live(inner) == 1 and _live(outer) == 0
        assert int(lib.cudaHostRegister(buf_o.data_ptr(), GiB, 0)) == 0
        assert _live(outer) == 1 and _live(inner) == 1
    assert ctypes.CDLL.__name__ == "CDLL" and type(ctypes.CDLL) is type


def test_handles_kept_across_fakes_reach_the_current_one() -> None:
    kept: dict[str, object] = {}
    for n in range(3):
        fake = FakeCuda()
        with fake.patch():
            buf = fake.virtual(GiB, name=f"b{n}")
            if not kept:
                kept["lib"] = _declare(ctypes.CDLL(ctypes.util.find_library("cudart") or ""))
                kept["cudart"] = torch.cuda.cudart()
                from cuda.bindings.driver import cuInit, cuMemHostRegister
                kept["cuInit"], kept["drv"] = cuInit, cuMemHostRegister
            lib, cudart = kept["lib"], kept["cudart"]
            assert int(lib.cudaHostRegister(buf.data_ptr(), 4096, 0)) == 0   # type: ignore[attr-defined]
            assert int(cudart.cudaHostRegister(buf.data_ptr() + 8192, 4096, 0)) == 0  # type: ignore[attr-defined]
            assert int(kept["cuInit"](0)[0]) == 0   # type: ignore[operator]
            assert int(kept["drv"](buf.data_ptr() + 16384, 4096, 0)[0]) == 0   # type: ignore[operator]
            # each call is this fake's: recorded in its trace, pinned in its driver
            assert _live(fake) == 3
            assert [e.api for e in fake.trace][-1] == "cuMemHostRegister"
            assert door_target(cudart) is fake.torch


def test_a_door_called_with_no_fake_patched_in_is_reported() -> None:
    fake = FakeCuda()
    with fake.patch():
        cudart = torch.cuda.cudart()
        lib = _declare(ctypes.CDLL("libcudart.so"))
    with retire_scope() as scope:
        with pytest.raises(StaleHandleError, match="no fake patched in"):
            cudart.cudaHostRegister(0x1000, 4096, 0)
        with pytest.raises(StaleHandleError, match="no fake patched in"):
            lib.cudaHostRegister(0x1000, 4096, 0)
    assert len(scope.stale) == 2 and "test_doors.py" in scope.stale[0]
    assert _live(fake) == 0 and len(fake.trace) == 0   # nothing reached the fake


def test_a_retired_fakes_object_is_reported_naming_where_it_is_kept() -> None:
    fake = FakeMooncake(env={})
    with retire_scope(), fake.patch():
        from mooncake.store import MooncakeDistributedStore
        store = MooncakeDistributedStore()
        assert isinstance(store, MooncakeDistributedStore)
    globals()["_KEPT_STORE"] = store
    try:
        with FakeMooncake(env={}).patch(), retire_scope() as scope, \
                pytest.raises(StaleHandleError, match="retired Mooncake deployment"):
            store.setup("h", "P2PHANDSHAKE", 0, 0, "tcp", "", "m:1")
        assert len(scope.stale) == 1
        assert f"{__name__}._KEPT_STORE" in scope.stale[0]
        assert "MooncakeDistributedStore object" in scope.stale[0]
        assert repr(store).startswith("<")   # dunder names still work (gc, repr, isinstance)
    finally:
        del globals()["_KEPT_STORE"]


def test_pyverbs_bound_at_import_reaches_each_fabric() -> None:
    first, second = Fabric(devices={"mlx5_0": "mlx5"}), Fabric(devices={"mlx5_0": "erdma"})
    with first.patch():
        import pyverbs.device as device_module
        from pyverbs.device import Context, get_device_list
    sizes = []
    for fabric in (first, second):
        with fabric.patch():
            with Context(name=get_device_list()[0].name) as ctx:
                sizes.append(int(ctx.query_device().max_mr_size))
            # vars() lists the current node's names, as on the real module
            assert "Context" in vars(device_module) and "get_device_list" in dir(device_module)
    expected = [int(f.node().nics["mlx5_0"].attr["max_mr_size"]) for f in (first, second)]
    assert sizes == expected and expected[0] != expected[1]
    assert "pyverbs" not in sys.modules
