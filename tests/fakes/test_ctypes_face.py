"""libcudart through ctypes under ``fake.patch()``: ctypes conventions, its own runtime instance.

vllm-project/vllm PR #50070 keeps registration and error draining on one runtime handle by
loading libcudart with ctypes (docs/cuda-runtime.md §6, §10); xcena-dev/maru PR #65 dlopens
every mapped libcudart copy to clear pending errors. C signatures are those of
``cuda_runtime_api.h`` [DOC]; return codes follow docs/cuda-runtime.md §2-§4 as for the other faces.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading

import numpy as np
import pytest

from kvreg.fakes.cuda.ctypes_face import FakeCudartLibrary, is_libcudart
from kvreg.fakes.cuda.cuda_python_face import NotModelledError
from kvreg.fakes.cuda.fake_cuda import FakeCuda
from kvreg.fakes.cuda.profile import PROFILES

MiB = 1 << 20


class PointerAttributes(ctypes.Structure):
    """struct cudaPointerAttributes (driver_types.h) [DOC], as ctypes code declares it."""

    _fields_ = [("type", ctypes.c_int), ("device", ctypes.c_int),
                ("devicePointer", ctypes.c_void_p), ("hostPointer", ctypes.c_void_p),
                ("reserved", ctypes.c_long * 8)]


def _declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    lib.cudaHostRegister.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
    lib.cudaHostRegister.restype = ctypes.c_int
    lib.cudaHostUnregister.argtypes = [ctypes.c_void_p]
    lib.cudaGetErrorString.argtypes = [ctypes.c_int]
    lib.cudaGetErrorString.restype = ctypes.c_char_p
    lib.cudaPointerGetAttributes.argtypes = [ctypes.POINTER(PointerAttributes), ctypes.c_void_p]
    return lib


@pytest.mark.parametrize("load", [
    lambda: ctypes.CDLL("libcudart.so.13"),
    lambda: ctypes.cdll.LoadLibrary("libcudart.so"),
    lambda: ctypes.CDLL(ctypes.util.find_library("cudart")),
    lambda: ctypes.CDLL("/usr/local/cuda/lib64/libcudart.so.13.0.96"),
], ids=["CDLL", "cdll.LoadLibrary", "find_library", "full-path"])
def test_every_ctypes_door_reaches_the_fake(load: object) -> None:
    fake = FakeCuda()
    with fake.patch():
        lib = load()  # type: ignore[operator]
        assert isinstance(lib, FakeCudartLibrary) and isinstance(lib, ctypes.CDLL)
        buf = fake.virtual(MiB)
        _declare(lib)
        assert lib.cudaHostRegister(buf.data_ptr(), MiB, 0) == 0
        assert [r.base for r in fake.live_registrations()] == [buf.data_ptr()]
        assert lib.cudaHostUnregister(buf.data_ptr()) == 0
    assert fake.trace.codes("cudaHostRegister") == [0]


def test_find_library_and_other_libraries_are_untouched() -> None:
    fake = FakeCuda()
    before = ctypes.util.find_library("c")
    with fake.patch():
        assert ctypes.util.find_library("cudart") == "libcudart.so.13"
        assert ctypes.util.find_library("c") == before
        libc = ctypes.CDLL(None)
        assert not isinstance(libc, FakeCudartLibrary)
        assert libc.getpid() > 0
    assert ctypes.CDLL.__name__ == "CDLL"
    assert FakeCuda("h100-r575").libcudart_soname == "libcudart.so.12"


def test_not_patched_outside_the_block() -> None:
    fake = FakeCuda()
    with fake.patch():
        pass
    try:
        lib = ctypes.CDLL("libcudart.so.13")
    except OSError:
        return   # no real libcudart on this machine: the real loader answered
    assert not isinstance(lib, FakeCudartLibrary)


def test_results_are_c_ints_and_errors_follow_the_spec() -> None:
    # docs/cuda-runtime.md §2.2 overlap -> 712, size 0 -> 1; §3 interior -> 1, twice -> 713
    fake = FakeCuda()
    arr = np.zeros(4 * 4096, np.uint8)
    p = arr.ctypes.data
    lib = _declare(fake.load_libcudart("libcudart.so.13"))
    assert lib.cudaHostRegister(p, arr.nbytes, 0) == 0
    codes = [lib.cudaHostRegister(p + 80, 160, 0), lib.cudaHostRegister(p, 0, 0),
             lib.cudaHostUnregister(p + 4096), lib.cudaHostUnregister(p),
             lib.cudaHostUnregister(p)]
    assert codes == [712, 1, 1, 0, 713]
    assert all(type(c) is int for c in codes)


def test_error_string_needs_a_char_p_restype() -> None:
    # with restype left at c_int, the const char* comes back as a truncated number
    fake = FakeCuda()
    lib = fake.load_libcudart("libcudart.so")
    raw = lib.cudaGetErrorString(712)
    assert type(raw) is int
    lib.cudaGetErrorString.restype = ctypes.c_char_p
    assert lib.cudaGetErrorString(712) == \
        b"part or all of the requested memory range is already mapped"
    lib.cudaGetErrorName.restype = ctypes.c_char_p
    assert lib.cudaGetErrorName(713) == b"cudaErrorHostMemoryNotRegistered"


def test_pointer_without_argtypes_is_truncated_as_ctypes_truncates_it() -> None:
    # no argtypes: ctypes passes a Python int as a C int, so only the low 32 bits of a 64-bit
    # address arrive (here 0, a buffer aligned to 4 GiB: NULL -> 1, docs/cuda-runtime.md
    # §2.2), and an int of 2**64 or more does not convert at all
    fake = FakeCuda()
    buf = fake.space.virtual(MiB, align=1 << 32)
    assert buf.data_ptr() & 0xFFFFFFFF == 0 and buf.data_ptr() >> 32
    lib = fake.load_libcudart()
    assert lib.cudaHostRegister(buf.data_ptr(), MiB, 0) == 1
    with pytest.raises(ctypes.ArgumentError):
        lib.cudaHostRegister(1 << 64, MiB, 0)
    assert fake.live_registrations() == []
    lib.cudaHostRegister.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint]
    assert lib.cudaHostRegister(buf.data_ptr(), MiB, 0) == 0
    lib.cudaHostUnregister.argtypes = [ctypes.c_void_p]
    assert lib.cudaHostUnregister(buf.data_ptr()) == 0


def test_out_parameters_through_byref_and_pointers() -> None:
    fake = FakeCuda()
    lib = _declare(fake.load_libcudart())
    count, version = ctypes.c_int(-1), ctypes.c_int(-1)
    assert lib.cudaGetDeviceCount(ctypes.byref(count)) == 0 and count.value == 1
    assert lib.cudaRuntimeGetVersion(ctypes.pointer(version)) == 0
    # the system libcudart 13.0 (docs/cuda-runtime.md §2.2 [OBS-local])
    assert version.value == 13000
    value = ctypes.c_int(-1)
    assert lib.cudaDeviceGetAttribute(ctypes.byref(value), 91, 0) == 0 and value.value == 1
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    assert lib.cudaMemGetInfo(ctypes.byref(free), ctypes.byref(total)) == 0
    assert total.value == fake.profile.total_memory
    arr = np.zeros(8192, np.uint8)
    p = arr.ctypes.data
    assert lib.cudaHostRegister(p, arr.nbytes, 0) == 0
    attrs = PointerAttributes()
    assert lib.cudaPointerGetAttributes(ctypes.byref(attrs), p + 100) == 0
    # docs/cuda-runtime.md §4: registered host memory -> type Host (1), alias == VA, interior per
    # [INF]
    assert (attrs.type, attrs.device, attrs.devicePointer, attrs.hostPointer) == \
        (1, 0, p + 100, p + 100)
    dev = ctypes.c_void_p()
    lib.cudaHostGetDevicePointer.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p,
                                             ctypes.c_uint]
    assert lib.cudaHostGetDevicePointer(ctypes.byref(dev), p, 0) == 0 and dev.value == p
    assert lib.cudaHostUnregister(p) == 0


def test_failed_call_leaves_out_parameters_alone() -> None:
    fake = FakeCuda("no-driver")
    lib = fake.load_libcudart()
    count = ctypes.c_int(-7)
    assert lib.cudaGetDeviceCount(ctypes.byref(count)) == 35 and count.value == -7
    assert lib.cudaGetDeviceCount(None) == 35
    ok = FakeCuda().load_libcudart()
    assert ok.cudaGetDeviceCount(None) == 1     # NULL out-pointer -> InvalidValue [INF]
    assert ok.cudaGetLastError() == 1


def test_own_last_error_slot_per_runtime_instance() -> None:
    # docs/cuda-runtime.md §6: "cuda-python's cudaGetLastError cannot clear an error left in torch's
    # runtime, and the reverse also holds"; a ctypes-loaded libcudart is one more instance when it
    # is another file than torch's: here torch bundles libcudart-<hash>.so.13 (older wheels), so
    # libcudart.so.13 is the system's (docs/cuda-runtime.md §6.1)
    fake = FakeCuda(PROFILES["h200-r580"].replace(torch_cudart="bundled"))
    arr = np.zeros(4096, np.uint8)
    p = arr.ctypes.data
    lib = _declare(fake.load_libcudart("libcudart.so.13"))
    assert lib.cudaHostRegister(p, 4096, 0) == 0
    assert int(fake.torch.cudaHostRegister(p, 4096, 0)) == 712
    assert lib.cudaPeekAtLastError() == 0
    assert int(fake.runtime.cudaPeekAtLastError()[0]) == 0
    assert fake.torch_runtime.peek_at_last_error() == 712
    # torch's bundled libcudart loaded by path is torch's instance: it can drain torch's error
    bundled = fake.load_libcudart("/site-packages/nvidia/lib/libcudart-9b3f1e2a.so.13")
    assert bundled.cudaGetLastError() == 712
    assert fake.torch_runtime.peek_at_last_error() == 0
    assert lib.cudaHostUnregister(p) == 0


def test_last_error_is_per_thread() -> None:
    fake = FakeCuda()
    lib = _declare(fake.load_libcudart())
    assert lib.cudaHostRegister(None, 4096, 0) == 1
    seen: list[int] = []
    worker = threading.Thread(target=lambda: seen.append(lib.cudaPeekAtLastError()))
    worker.start()
    worker.join()
    assert seen == [0] and lib.cudaGetLastError() == 1


def test_unmodelled_symbol_raises_and_unknown_symbol_is_undefined() -> None:
    fake = FakeCuda()
    lib = fake.load_libcudart()
    assert hasattr(lib, "cudaMemcpy2D")
    with pytest.raises(NotModelledError, match=r"cudaMemcpy2D .*COVERAGE\.md"):
        lib.cudaMemcpy2D(0, 0, 0, 0, 0, 0, 0)
    with pytest.raises(AttributeError, match="undefined symbol"):
        lib.cudaNoSuchSymbol  # noqa: B018
    assert not hasattr(lib, "ibv_reg_mr")


def test_faults_and_trace_reach_the_ctypes_door() -> None:
    fake = FakeCuda()
    buf = fake.virtual(MiB)
    lib = _declare(fake.load_libcudart())
    fake.inject("cudaHostRegister", nth=1, error=2)
    assert lib.cudaHostRegister(buf.data_ptr(), MiB, 0) == 2
    assert lib.cudaGetLastError() == 2      # an injected failure leaves the same trace
    assert fake.live_registrations() == []
    assert lib.cudaHostRegister(buf.data_ptr(), MiB, 0) == 0
    assert [(e.face, e.code, e.injected) for e in fake.trace.calls("cudaHostRegister")] == \
        [("ctypes", 2, True), ("ctypes", 0, False)]
    assert lib.cudaHostUnregister(buf.data_ptr()) == 0


def test_a_raising_fault_surfaces_in_the_caller() -> None:
    # ctypes drops exceptions raised in callbacks; the fake re-raises them in the caller
    fake = FakeCuda()
    lib = _declare(fake.load_libcudart())
    fake.inject("cudaHostRegister", nth=1, raise_=RuntimeError("boom"))
    with pytest.raises(RuntimeError, match="boom"):
        lib.cudaHostRegister(fake.virtual(MiB).data_ptr(), MiB, 0)


@pytest.mark.parametrize(("name", "expected"), [
    ("libcudart.so", True), ("libcudart.so.13", True), ("libcudart.so.12.9.79", True),
    ("/opt/x/libcudart-ab12cd34.so.12", True), ("libcudart_static.a", False),
    ("libcuda.so.1", False), ("libcudart.so.13.bak", False), (None, False),
])
def test_which_names_are_libcudart(name: str | None, expected: bool) -> None:
    assert is_libcudart(name) is expected


def test_load_rejects_other_names() -> None:
    with pytest.raises(ValueError, match="libcudart"):
        FakeCuda().load_libcudart("libnccl.so.2")
