"""``libcudart`` loaded through ctypes: a fake shared library with ctypes' own conventions.

Registration code that must keep registration and error draining on one runtime handle
loads libcudart with ``ctypes.CDLL`` (vllm-project/vllm PR #50070, docs/cuda-runtime.md §6).
Under ``FakeCuda.patch()`` that load gives :class:`FakeCudartLibrary`: its functions are real
ctypes function pointers (settable ``argtypes``/``restype``/``errcheck``, ``c_int`` results by
default, arguments converted by ctypes itself, out-parameters written through ``byref`` or
pointers) whose C ends are Python callbacks with the C signatures of
``cuda_runtime_api.h`` [DOC]. So the pitfalls of ctypes code stay visible: a 64-bit pointer
passed without ``argtypes`` fails to convert as ctypes fails it, and a ``restype`` left at
``c_int`` on ``cudaGetErrorString`` yields a truncated address, not text.

Which runtime instance a name loads is the dynamic loader's answer (docs/cuda-runtime.md §6.1):
torch's, with its last-error slot, when glibc returns the object torch loaded (its soname
``libcudart.so.<major>`` in PyPI CUDA wheels, or the path of that file); the system libcudart,
another instance with its own slot, for any other name or file
(:meth:`~kvreg.fakes.cuda.fake_cuda.FakeCuda.is_torch_libcudart`). Registrations are the
driver's, shared with every other face.
"""

from __future__ import annotations

import ctypes
import re
import threading
from collections.abc import Callable
from typing import Any

from . import errors as E
from .cuda_runtime import FakeRuntime
from .symbols import NotModelledError, snapshot_names

__all__ = ["LIBCUDART_NAME", "CtypesCudartFace", "FakeCudartLibrary", "is_libcudart"]

# libcudart.so, libcudart.so.13, /usr/local/cuda/lib64/libcudart.so.13.0.96, and torch's
# bundled libcudart-<hash>.so.13
LIBCUDART_NAME = re.compile(r"(?:^|/)libcudart(?P<bundled>-[0-9a-f]+)?\.so(?:\.\d+)*$")

_vp, _sz, _uint, _int = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_int

# C signatures (cuda_runtime_api.h) [DOC]: name -> (restype, argtypes)
SIGNATURES: dict[str, tuple[Any, tuple[Any, ...]]] = {
    "cudaHostRegister": (_int, (_vp, _sz, _uint)),
    "cudaHostUnregister": (_int, (_vp,)),
    "cudaGetLastError": (_int, ()),
    "cudaPeekAtLastError": (_int, ()),
    "cudaGetErrorString": (_vp, (_int,)),
    "cudaGetErrorName": (_vp, (_int,)),
    "cudaGetDeviceCount": (_int, (_vp,)),
    "cudaGetDevice": (_int, (_vp,)),
    "cudaSetDevice": (_int, (_int,)),
    "cudaDeviceGetAttribute": (_int, (_vp, _int, _int)),
    "cudaPointerGetAttributes": (_int, (_vp, _vp)),
    "cudaHostGetDevicePointer": (_int, (_vp, _vp, _uint)),
    "cudaHostGetFlags": (_int, (_vp, _vp)),
    "cudaRuntimeGetVersion": (_int, (_vp,)),
    "cudaDriverGetVersion": (_int, (_vp,)),
    "cudaMalloc": (_int, (_vp, _sz)),
    "cudaFree": (_int, (_vp,)),
    "cudaHostAlloc": (_int, (_vp, _sz, _uint)),
    "cudaMallocHost": (_int, (_vp, _sz)),
    "cudaFreeHost": (_int, (_vp,)),
    "cudaMemGetInfo": (_int, (_vp, _vp)),
    "cudaStreamCreate": (_int, (_vp,)),
    "cudaStreamDestroy": (_int, (_vp,)),
    "cudaStreamSynchronize": (_int, (_vp,)),
    "cudaDeviceSynchronize": (_int, ()),
    "cudaMemcpyAsync": (_int, (_vp, _vp, _sz, _int, _vp)),
}
_STRINGS = ("cudaGetErrorString", "cudaGetErrorName")

_PENDING = threading.local()   # an exception raised inside a callback, re-raised by the caller
_TEXT: dict[bytes, ctypes.Array[ctypes.c_char]] = {}   # static C strings, like libcudart's
_TEXT_LOCK = threading.Lock()


def is_libcudart(name: object) -> bool:
    return isinstance(name, str) and LIBCUDART_NAME.search(name) is not None


def _static_text(text: str) -> int:
    raw = text.encode()
    with _TEXT_LOCK:
        buf = _TEXT.get(raw)
        if buf is None:
            buf = _TEXT[raw] = ctypes.create_string_buffer(raw)
    return ctypes.addressof(buf)


def _put(ctype: Any, address: int, value: int) -> None:
    ctype.from_address(address).value = value


class CtypesCudartFace:
    """The C-level calls of one libcudart instance: ints in, an error code out.

    Out-parameters arrive as addresses and are written only on success; a NULL
    out-pointer gives cudaErrorInvalidValue [INF].
    """

    def __init__(self, runtime: FakeRuntime) -> None:
        self._kvreg_runtime = runtime

    def _out(self, code: int, writes: list[tuple[Any, int | None, int]]) -> int:
        if code:
            return code
        if any(addr is None for _, addr, _ in writes):
            return self._kvreg_runtime._fail(E.INVALID_VALUE)
        for ctype, addr, value in writes:
            _put(ctype, addr, value)   # type: ignore[arg-type]
        return 0

    def cudaHostRegister(self, ptr: int | None, size: int, flags: int) -> int:
        return self._kvreg_runtime.host_register(ptr or 0, size, flags)

    def cudaHostUnregister(self, ptr: int | None) -> int:
        return self._kvreg_runtime.host_unregister(ptr or 0)

    def cudaGetLastError(self) -> int:
        return self._kvreg_runtime.get_last_error()

    def cudaPeekAtLastError(self) -> int:
        return self._kvreg_runtime.peek_at_last_error()

    def cudaGetErrorString(self, error: int) -> int:
        return _static_text(E.error_string(error))

    def cudaGetErrorName(self, error: int) -> int:
        return _static_text(E.error_name(error))

    def cudaGetDeviceCount(self, count: int | None) -> int:
        code, n = self._kvreg_runtime.get_device_count()
        return self._out(code, [(_int, count, n or 0)])

    def cudaGetDevice(self, device: int | None) -> int:
        code, d = self._kvreg_runtime.get_device()
        return self._out(code, [(_int, device, d or 0)])

    def cudaSetDevice(self, device: int) -> int:
        return self._kvreg_runtime.set_device(device)

    def cudaDeviceGetAttribute(self, value: int | None, attr: int, device: int) -> int:
        code, v = self._kvreg_runtime.device_get_attribute(attr, device)
        return self._out(code, [(_int, value, v or 0)])

    def cudaPointerGetAttributes(self, attributes: int | None, ptr: int | None) -> int:
        """Writes ``{type, device, devicePointer, hostPointer}`` (offsets 0, 4, 8, 16)."""
        code, a = self._kvreg_runtime.pointer_get_attributes(ptr or 0)
        if code or a is None:
            return code
        base = attributes
        return self._out(0, [(_int, base, a.type),
                             (_int, None if base is None else base + 4, a.device),
                             (ctypes.c_uint64, None if base is None else base + 8,
                              a.devicePointer),
                             (ctypes.c_uint64, None if base is None else base + 16,
                              a.hostPointer)])

    def cudaHostGetDevicePointer(self, p_device: int | None, host: int | None,
                                 flags: int) -> int:
        code, dev = self._kvreg_runtime.host_get_device_pointer(host or 0, flags)
        return self._out(code, [(ctypes.c_uint64, p_device, dev or 0)])

    def cudaHostGetFlags(self, p_flags: int | None, host: int | None) -> int:
        code, flags = self._kvreg_runtime.host_get_flags(host or 0)
        return self._out(code, [(_uint, p_flags, flags or 0)])

    def cudaRuntimeGetVersion(self, version: int | None) -> int:
        code, v = self._kvreg_runtime.runtime_get_version()
        return self._out(code, [(_int, version, v)])

    def cudaDriverGetVersion(self, version: int | None) -> int:
        code, v = self._kvreg_runtime.driver_get_version()
        return self._out(code, [(_int, version, v)])

    def cudaMalloc(self, dev_ptr: int | None, size: int) -> int:
        code, p = self._kvreg_runtime.malloc(size)
        return self._out(code, [(ctypes.c_uint64, dev_ptr, p or 0)])

    def cudaFree(self, ptr: int | None) -> int:
        return self._kvreg_runtime.free(ptr or 0)

    def cudaHostAlloc(self, p_host: int | None, size: int, flags: int) -> int:
        code, p = self._kvreg_runtime.host_alloc(size, flags)
        return self._out(code, [(ctypes.c_uint64, p_host, p or 0)])

    def cudaMallocHost(self, ptr: int | None, size: int) -> int:
        return self.cudaHostAlloc(ptr, size, 0)

    def cudaFreeHost(self, ptr: int | None) -> int:
        return self._kvreg_runtime.free_host(ptr or 0)

    def cudaMemGetInfo(self, free: int | None, total: int | None) -> int:
        code, f, t = self._kvreg_runtime.mem_get_info()
        return self._out(code, [(_sz, free, f or 0), (_sz, total, t or 0)])

    def cudaStreamCreate(self, stream: int | None) -> int:
        code, handle = self._kvreg_runtime.stream_create()
        return self._out(code, [(ctypes.c_uint64, stream, handle or 0)])

    def cudaStreamDestroy(self, stream: int | None) -> int:
        return self._kvreg_runtime.stream_destroy(stream or 0)

    def cudaStreamSynchronize(self, stream: int | None) -> int:
        return self._kvreg_runtime.synchronize(stream or 0)

    def cudaDeviceSynchronize(self) -> int:
        return self._kvreg_runtime.synchronize(None)

    def cudaMemcpyAsync(self, dst: int | None, src: int | None, count: int, kind: int,
                        stream: int | None) -> int:
        return self._kvreg_runtime.memcpy_async(dst or 0, src or 0, count, kind, stream or 0)


class _FakeFuncPtr(ctypes._CFuncPtr):  # type: ignore[misc, name-defined]
    """A cdecl function pointer like ``CDLL._FuncPtr``; re-raises what its callback raised."""

    _flags_ = ctypes._FUNCFLAG_CDECL  # type: ignore[attr-defined]
    _restype_ = ctypes.c_int

    def __call__(self, *args: Any) -> Any:
        _PENDING.error = None
        result = super().__call__(*args)
        error = getattr(_PENDING, "error", None)
        if error is not None:
            _PENDING.error = None
            raise error
        return result


def _guarded(fn: Callable[..., Any], fallback: int) -> Callable[..., Any]:
    """ctypes prints and drops exceptions raised in callbacks: keep them for the caller."""

    def call(*args: Any) -> Any:
        try:
            return fn(*args)
        except BaseException as exc:   # re-raised in the calling thread by _FakeFuncPtr
            _PENDING.error = exc
            return fallback

    return call


class FakeCudartLibrary(ctypes.CDLL):
    """What ``ctypes.CDLL("libcudart.so...")`` returns under the fake."""

    _kvreg_fake_module = True

    def __init__(self, name: str, face: Any = None, raw: CtypesCudartFace | None = None, *,
                 resolve: Callable[[], tuple[Any, CtypesCudartFace]] | None = None) -> None:
        """One fake's runtime (``face``, ``raw``), or, with ``resolve``, whichever
        ``resolve()`` names at each call: the process-wide library of
        :mod:`kvreg.fakes.patching`, whose function pointers outlive every fake."""
        # no dlopen: the fields ctypes.CDLL's own methods read are set by hand
        self._name = name
        self._handle = 0
        self._FuncPtr = _FakeFuncPtr
        fixed: tuple[Any, Any] = (face, raw)

        def bound() -> tuple[Any, Any]:
            return fixed

        self._kvreg_resolve: Callable[[], tuple[Any, Any]] = resolve or bound
        self._kvreg_keep: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"<FakeCudartLibrary '{self._name}' (kvreg fake)>"

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        func = self.__getitem__(name)
        setattr(self, name, func)
        return func

    def __getitem__(self, name: Any) -> Any:
        if not isinstance(name, str):
            raise AttributeError(f"{self._name}: symbols are looked up by name here")
        if name in SIGNATURES:
            restype, argtypes = SIGNATURES[name]
            which = 1 if name in _STRINGS else 0
            resolve = self._kvreg_resolve

            def forward(*args: Any, _name: str = name) -> Any:
                target: Any = resolve()[which]
                return getattr(target, _name)(*args)

            impl = _guarded(forward, E.UNKNOWN)
            callback = ctypes.CFUNCTYPE(restype, *argtypes)(impl)
        elif snapshot_names("runtime").get(name) == "function" and name.startswith("cuda"):
            message = (f"{name} in libcudart is not modelled by kvreg's fake CUDA runtime; "
                       "see COVERAGE.md for what is modelled")

            def not_modelled() -> int:
                raise NotModelledError(message)

            callback = ctypes.CFUNCTYPE(ctypes.c_int)(_guarded(not_modelled, E.UNKNOWN))
        else:
            raise AttributeError(f"{self._name}: undefined symbol: {name}")
        self._kvreg_keep[name] = callback   # the C callback must outlive every call
        func = _FakeFuncPtr(ctypes.cast(callback, ctypes.c_void_p).value)
        func.__name__ = name
        return func
