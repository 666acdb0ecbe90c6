"""The ``cuda.bindings.runtime`` face: tuple returns, int-subclass ``cudaError_t``.

Exact to cuda-python (docs/cuda-runtime.md §9): every function returns a tuple whose output
slots are None on error; ``cudaError_t`` is the real enum when cuda-bindings is installed
(falsy success, ``.name``, ``.value``); arguments are converted leniently as the binding does
(None is NULL, buffers give their address, floats are truncated) and rejected with the same
exception types (TypeError for bad pointers, OverflowError for negative or huge sizes).
An API the fake does not model raises :class:`NotModelledError` naming COVERAGE.md.
"""

from __future__ import annotations

import ctypes
import enum
import functools
import types
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import errors as E
from .cuda_runtime import FakeRuntime
from .device_attributes import attribute_table
from .symbols import (
    HOST_ONLY_HELPERS,
    NotModelledError,
    not_modelled_stub,
    public_names,
    real_module,
    snapshot_names,
)

__all__ = ["OUTPUTS", "CudaBindingsFace", "NotModelledError", "bindings_module",
           "not_modelled_stub", "pointer_arg", "unsigned_arg"]


def bindings_module() -> types.ModuleType | None:
    """The real ``cuda.bindings.runtime`` if installed, whatever is patched in its place."""
    return real_module("runtime")


# number of output slots after the error, per API (docs/cuda-runtime.md §9 return convention)
OUTPUTS: dict[str, int] = {
    "cudaHostRegister": 0, "cudaHostUnregister": 0, "cudaHostAlloc": 1, "cudaMallocHost": 1,
    "cudaFreeHost": 0, "cudaMalloc": 1, "cudaFree": 0, "cudaPointerGetAttributes": 1,
    "cudaHostGetDevicePointer": 1, "cudaHostGetFlags": 1, "cudaGetErrorString": 1,
    "cudaGetErrorName": 1, "cudaGetLastError": 0, "cudaPeekAtLastError": 0,
    "cudaGetDeviceCount": 1, "cudaRuntimeGetVersion": 1, "cudaDriverGetVersion": 1,
    "cudaMemcpyAsync": 0, "cudaMemcpyBatchAsync": 0, "cudaStreamCreate": 1,
    "cudaStreamDestroy": 0, "cudaStreamSynchronize": 0, "cudaDeviceSynchronize": 0,
    "cudaSetDevice": 0, "cudaGetDevice": 1, "cudaDeviceGetAttribute": 1, "cudaMemGetInfo": 2,
    "getLocalRuntimeVersion": 1,
}

_U64 = 1 << 64
_U32 = 1 << 32
_PTR_ERR = ("Provided argument is of type {} but expected Type None, int or object with Buffer "
            "Protocol")


def pointer_arg(value: Any) -> int:
    """cuda-python's pointer conversion (docs/cuda-runtime.md §9): int, None, buffer, c_void_p,
    float."""
    if value is None:
        return 0
    if isinstance(value, ctypes.c_void_p):
        return int(value.value or 0)
    if isinstance(value, float):
        value = int(value)
    if isinstance(value, int):
        if 0 <= value < _U64:
            return int(value)
        raise TypeError(_PTR_ERR.format(type(value)))
    try:
        view = memoryview(value)
    except TypeError:
        # objects with an int conversion (cudaStream_t, CUdeviceptr) are accepted
        if hasattr(value, "__int__") and not isinstance(value, str):
            return int(value)
        raise TypeError(_PTR_ERR.format(type(value))) from None
    arr = np.frombuffer(view.cast("B"), np.uint8)
    return int(arr.__array_interface__["data"][0]) if arr.size else 0


def unsigned_arg(value: Any, limit: int, ctype: str) -> int:
    """size_t / unsigned int conversion: floats truncate, negatives and overflow raise."""
    if isinstance(value, float):
        value = int(value)
    if hasattr(value, "__int__") and not isinstance(value, int | str):
        value = int(value)
    if not isinstance(value, int):
        raise TypeError(f"an integer is required (got type {type(value).__name__})")
    if value < 0:
        raise OverflowError(f"can't convert negative value to {ctype}")
    if value >= limit:
        raise OverflowError(f"value too large to convert to {ctype}" if limit == _U32
                            else "Python int too large to convert to C unsigned long")
    return value


def _stream(value: Any) -> int:
    """Streams: None is the legacy NULL stream (docs/cuda-runtime.md §5.3); handles convert with
    int().

    As the binding does (docs/cuda-runtime.md §9 conversion rules): strings and buffers give
    TypeError,
    negative values and values of 2**64 or more give OverflowError.
    """
    if value is None:
        return 0
    if isinstance(value, str | bytes | bytearray | memoryview) or not hasattr(value, "__int__"):
        raise TypeError("an integer is required")
    number = int(value)
    if number < 0:
        raise OverflowError("can't convert negative value to unsigned PY_LONG_LONG")
    if number >= _U64:
        raise OverflowError("Python int too large to convert to C unsigned long")
    return number


def _size_list(label: str, values: Sequence[Any] | np.ndarray, n: int) -> np.ndarray:
    """A ``list[size_t]`` argument of cudaMemcpyBatchAsync (docs/cuda-runtime.md §5.3: wrong element
    types
    raise TypeError; docs/cuda-runtime.md §9: negative sizes raise OverflowError). numpy arrays are
    accepted
    as a fast path for large batches."""
    if isinstance(values, np.ndarray):
        arr = values[:n]
        if arr.dtype.kind not in "iu":
            raise TypeError(f"Argument '{label}' is not instance of type "
                            "(expected tuple[int] or list[int]")
        if arr.dtype.kind == "i" and arr.size and int(arr.min()) < 0:
            raise OverflowError("can't convert negative value to size_t")
        return arr.astype(np.int64, copy=False)
    head = list(values[:n])
    for v in head:
        if not isinstance(v, int | np.integer):
            raise TypeError(f"Argument '{label}' is not instance of type "
                            "(expected tuple[int] or list[int]")
        if v < 0:
            raise OverflowError("can't convert negative value to size_t")
        if v >= _U64:
            raise OverflowError("Python int too large to convert to C unsigned long")
    return np.asarray(head, dtype=np.int64)


def _int_enum(name: str, members: dict[str, int]) -> Any:
    """An IntEnum built at run time (mypy cannot follow the functional API's members)."""
    return enum.IntEnum(name, members)


@functools.cache
def _make_fallback_types() -> dict[str, Any]:
    """Stand-ins for the binding's enums and structs when cuda-bindings is absent (built
    once: the same types for every face, as the real module's are)."""
    err = _int_enum("cudaError_t", {name: code for code, (name, _) in E.ERRORS.items()})
    mem = _int_enum("cudaMemoryType", {"cudaMemoryTypeUnregistered": 0,
                                          "cudaMemoryTypeHost": 1, "cudaMemoryTypeDevice": 2,
                                          "cudaMemoryTypeManaged": 3})
    kind = _int_enum("cudaMemcpyKind", {"cudaMemcpyHostToHost": 0,
                                           "cudaMemcpyHostToDevice": 1,
                                           "cudaMemcpyDeviceToHost": 2,
                                           "cudaMemcpyDeviceToDevice": 3,
                                           "cudaMemcpyDefault": 4})
    order = _int_enum("cudaMemcpySrcAccessOrder", {
        "cudaMemcpySrcAccessOrderInvalid": 0, "cudaMemcpySrcAccessOrderStream": 1,
        "cudaMemcpySrcAccessOrderDuringApiCall": 2, "cudaMemcpySrcAccessOrderAny": 3,
        "cudaMemcpySrcAccessOrderMax": 0x7FFFFFFF})
    loc = _int_enum("cudaMemLocationType", {
        "cudaMemLocationTypeInvalid": 0, "cudaMemLocationTypeDevice": 1,
        "cudaMemLocationTypeHost": 2, "cudaMemLocationTypeHostNuma": 3,
        "cudaMemLocationTypeHostNumaCurrent": 4})
    attr = _int_enum("cudaDeviceAttr", {row.name: a for a, row in
                                        attribute_table("H200").items()})

    class cudaMemLocation:
        def __init__(self) -> None:
            self.type = loc(0)
            self.id = 0

    class cudaMemcpyAttributes:
        def __init__(self) -> None:
            self.srcAccessOrder = order(0)
            self.srcLocHint = cudaMemLocation()
            self.dstLocHint = cudaMemLocation()
            self.flags = 0

    class cudaPointerAttributes:
        def __init__(self) -> None:
            self.type = mem(0)
            self.device = 0
            self.devicePointer = 0
            self.hostPointer = 0

    class cudaStream_t:
        def __init__(self, init_value: int = 0) -> None:
            self._v = int(init_value)

        def __int__(self) -> int:
            return self._v

        def getPtr(self) -> int:
            return self._v

        def __repr__(self) -> str:
            return f"<CUstream {self._v:#x}>"

    return {"cudaError_t": err, "cudaMemoryType": mem, "cudaMemcpyKind": kind,
            "cudaMemcpySrcAccessOrder": order, "cudaMemLocationType": loc,
            "cudaDeviceAttr": attr, "cudaMemLocation": cudaMemLocation,
            "cudaMemcpyAttributes": cudaMemcpyAttributes,
            "cudaPointerAttributes": cudaPointerAttributes, "cudaStream_t": cudaStream_t}


_MEMBERS: weakref.WeakKeyDictionary[Any, dict[int, Any]] = weakref.WeakKeyDictionary()


def _error_members(err: Any) -> dict[int, Any]:
    """Every modelled code as a member of the bindings' ``cudaError_t`` (or the fallback
    enum): made once per enum class, not once per fake (read-only afterwards)."""
    hit = _MEMBERS.get(err)
    if hit is None:
        hit = _MEMBERS[err] = {code: err(code) for code in E.ERRORS}
    return hit


_TYPE_NAMES = ("cudaError_t", "cudaMemoryType", "cudaMemcpyKind", "cudaMemcpySrcAccessOrder",
               "cudaMemLocationType", "cudaDeviceAttr", "cudaMemLocation",
               "cudaMemcpyAttributes", "cudaPointerAttributes", "cudaStream_t")


class CudaBindingsFace(types.ModuleType):
    """What ``from cuda.bindings import runtime`` gives under the fake."""

    _kvreg_fake_module = True

    cudaHostRegisterDefault = 0
    cudaHostRegisterPortable = 1
    cudaHostRegisterMapped = 2
    cudaHostRegisterIoMemory = 4
    cudaHostRegisterReadOnly = 8
    cudaHostAllocDefault = 0
    cudaHostAllocPortable = 1
    cudaHostAllocMapped = 2
    cudaHostAllocWriteCombined = 4
    cudaStreamLegacy = 1
    cudaStreamPerThread = 2
    cudaCpuDeviceId = -1
    cudaInvalidDeviceId = -2

    def __init__(self, runtime: FakeRuntime, *, use_real_types: bool = True) -> None:
        super().__init__("cuda.bindings.runtime", "cuda-python runtime (kvreg fake)")
        self._kvreg_runtime = runtime
        real = bindings_module() if use_real_types else None
        types_ = ({n: getattr(real, n) for n in _TYPE_NAMES} if real is not None
                  else _make_fallback_types())
        self.__dict__.update(types_)
        self._real = real
        self._err = types_["cudaError_t"]
        self._errs = _error_members(self._err)

    # -- helpers -------------------------------------------------------------------------------
    def _as_error(self, code: int) -> Any:
        """The binding's cudaError_t member for ``code`` (a plain enum value when unnamed)."""
        hit = self._errs.get(code)
        return hit if hit is not None else self._err(code)

    @property
    def bindings_major(self) -> int:
        return self._kvreg_runtime.driver.profile.bindings_major

    # -- error strings and state (docs/cuda-runtime.md §1, §6) -------------------------------------
    def cudaGetErrorString(self, error: Any) -> tuple[Any, bytes]:
        """(cudaSuccess, text) for any code; unknown codes give 'unrecognized error code' (§1)."""
        return self._as_error(0), E.error_string(int(error)).encode()

    def cudaGetErrorName(self, error: Any) -> tuple[Any, bytes]:
        """(cudaSuccess, name) for any code; unknown codes give 'unrecognized error code' (§1)."""
        return self._as_error(0), E.error_name(int(error)).encode()

    def cudaGetLastError(self) -> tuple[Any]:
        """Returns and clears this runtime instance's pending error for the calling thread (§6)."""
        return (self._as_error(self._kvreg_runtime.get_last_error()),)

    def cudaPeekAtLastError(self) -> tuple[Any]:
        """Returns the pending error without clearing it (§6)."""
        return (self._as_error(self._kvreg_runtime.peek_at_last_error()),)

    # -- registration (docs/cuda-runtime.md §2, §3) ------------------------------------------------
    def cudaHostRegister(self, ptr: Any, size: Any, flags: Any) -> tuple[Any]:
        """Overlap -> 712, size 0 or NULL -> 1, bad flags -> 1, ReadOnly -> 801, ceiling -> 2."""
        p = pointer_arg(ptr)
        s = unsigned_arg(size, _U64, "size_t")
        f = unsigned_arg(flags, _U32, "unsigned int")
        return (self._as_error(self._kvreg_runtime.host_register(p, s, f)),)

    def cudaHostUnregister(self, ptr: Any) -> tuple[Any]:
        """Exact base -> 0; interior pointer -> 1; unknown or released -> 713 (§3)."""
        return (self._as_error(self._kvreg_runtime.host_unregister(pointer_arg(ptr))),)

    def cudaHostAlloc(self, size: Any, flags: Any) -> tuple[Any, int | None]:
        """Pinned, mapped host memory (real bytes up to 64 MiB, virtual above)."""
        code, ptr = self._kvreg_runtime.host_alloc(unsigned_arg(size, _U64, "size_t"),
                                                   unsigned_arg(flags, _U32, "unsigned int"))
        return self._as_error(code), ptr

    def cudaMallocHost(self, size: Any) -> tuple[Any, int | None]:
        """cudaHostAlloc with default flags."""
        code, ptr = self._kvreg_runtime.host_alloc(unsigned_arg(size, _U64, "size_t"), 0)
        return self._as_error(code), ptr

    def cudaFreeHost(self, ptr: Any) -> tuple[Any]:
        """Frees a cudaHostAlloc block; anything else -> 1."""
        return (self._as_error(self._kvreg_runtime.free_host(pointer_arg(ptr))),)

    def cudaMalloc(self, size: Any) -> tuple[Any, int | None]:
        """Device memory at fake device addresses; out of profile memory -> 2."""
        code, ptr = self._kvreg_runtime.malloc(unsigned_arg(size, _U64, "size_t"))
        return self._as_error(code), ptr

    def cudaFree(self, devPtr: Any) -> tuple[Any]:
        """Frees device memory; an unknown pointer -> 1."""
        return (self._as_error(self._kvreg_runtime.free(pointer_arg(devPtr))),)

    # -- queries (docs/cuda-runtime.md §4) ---------------------------------------------------------
    def cudaPointerGetAttributes(self, ptr: Any) -> tuple[Any, Any]:
        """Unregistered (0), Host (1) or Device (2); interior addresses per profile (§4)."""
        code, attrs = self._kvreg_runtime.pointer_get_attributes(pointer_arg(ptr))
        if code or attrs is None:
            return self._as_error(code), None
        out = self.cudaPointerAttributes()
        out.type = self.cudaMemoryType(attrs.type)
        out.device = attrs.device
        out.devicePointer = attrs.devicePointer
        out.hostPointer = attrs.hostPointer
        return self._as_error(0), out

    def cudaHostGetDevicePointer(self, pHost: Any, flags: Any) -> tuple[Any, int | None]:
        """The device alias (== host VA unless attribute 91 is 0); flags must be 0 (§4)."""
        code, dev = self._kvreg_runtime.host_get_device_pointer(
            pointer_arg(pHost), unsigned_arg(flags, _U32, "unsigned int"))
        return self._as_error(code), dev

    def cudaHostGetFlags(self, pHost: Any) -> tuple[Any, int | None]:
        """Flags of cudaHostAlloc memory (| Mapped); registered memory per profile [UNC] (§4)."""
        code, flags = self._kvreg_runtime.host_get_flags(pointer_arg(pHost))
        return self._as_error(code), flags

    def cudaGetDeviceCount(self) -> tuple[Any, int | None]:
        """(35, None) without a driver, (100, None) without a GPU (§2.2, §9)."""
        code, n = self._kvreg_runtime.get_device_count()
        return self._as_error(code), n

    def cudaGetDevice(self) -> tuple[Any, int | None]:
        """The calling thread's current device."""
        code, d = self._kvreg_runtime.get_device()
        return self._as_error(code), d

    def cudaSetDevice(self, device: Any) -> tuple[Any]:
        """Sets the calling thread's device; out of range -> 101."""
        return (self._as_error(self._kvreg_runtime.set_device(int(device))),)

    def cudaDeviceGetAttribute(self, attr: Any, device: Any) -> tuple[Any, int | None]:
        """Every cudaDeviceAttr member from the profile's table; reserved ones -> 1."""
        code, value = self._kvreg_runtime.device_get_attribute(int(attr), int(device))
        return self._as_error(code), value

    def cudaMemGetInfo(self) -> tuple[Any, int | None, int | None]:
        """(free, total) of the profile's device memory."""
        code, free, total = self._kvreg_runtime.mem_get_info()
        return self._as_error(code), free, total

    def cudaRuntimeGetVersion(self) -> tuple[Any, int]:
        """Succeeds even without a driver (§9)."""
        code, v = self._kvreg_runtime.runtime_get_version()
        return self._as_error(code), v

    def getLocalRuntimeVersion(self) -> tuple[Any, int]:
        """The fake libcudart's version, with or without a driver (§9).

        The real helper dlopens libcudart through cuda.pathfinder, which cannot see a fake."""
        return self._as_error(0), self._kvreg_runtime.driver.profile.runtime_version

    def cudaDriverGetVersion(self) -> tuple[Any, int]:
        """0 without a driver (§2.2)."""
        code, v = self._kvreg_runtime.driver_get_version()
        return self._as_error(code), v

    # -- streams -------------------------------------------------------------------------------
    def cudaStreamCreate(self) -> tuple[Any, Any]:
        """A stream handle for the copy APIs."""
        code, handle = self._kvreg_runtime.stream_create()
        return self._as_error(code), (self.cudaStream_t(handle) if handle is not None else None)

    def cudaStreamDestroy(self, stream: Any) -> tuple[Any]:
        """Unknown handle -> 400."""
        return (self._as_error(self._kvreg_runtime.stream_destroy(_stream(stream))),)

    def cudaStreamSynchronize(self, stream: Any) -> tuple[Any]:
        """Where asynchronous errors (sticky 700) surface."""
        return (self._as_error(self._kvreg_runtime.synchronize(_stream(stream))),)

    def cudaDeviceSynchronize(self) -> tuple[Any]:
        """Where asynchronous errors (sticky 700) surface."""
        return (self._as_error(self._kvreg_runtime.synchronize(None)),)

    # -- copies (docs/cuda-runtime.md §5) ----------------------------------------------------------
    def cudaMemcpyAsync(self, dst: Any, src: Any, count: Any, kind: Any,
                        stream: Any) -> tuple[Any]:
        """Host range wholly registered or pageable, else 1; spans per profile [UNC] (§5)."""
        code = self._kvreg_runtime.memcpy_async(pointer_arg(dst), pointer_arg(src),
                                                unsigned_arg(count, _U64, "size_t"), int(kind),
                                                _stream(stream))
        return (self._as_error(code),)

    def cudaMemcpyBatchAsync(self, dsts: Sequence[Any] | np.ndarray,
                             srcs: Sequence[Any] | np.ndarray,
                             sizes: Sequence[int] | np.ndarray, count: Any,
                             attrs: Sequence[Any], attrsIdxs: Sequence[int], numAttrs: Any,
                             stream: Any) -> tuple[Any, ...]:
        """12.x returns (err, failIdx) with failIdx None on error; 13.x returns (err,)."""
        n = unsigned_arg(count, _U64, "size_t")
        na = unsigned_arg(numAttrs, _U64, "size_t")
        for _label, seq, need in (("dsts", dsts, n), ("srcs", srcs, n), ("sizes", sizes, n),
                                 ("attrs", attrs, na), ("attrsIdxs", attrsIdxs, na)):
            if seq is None:
                seq = ()
            if len(seq) < need:   # the binding's own Python-side check (docs/cuda-runtime.md §5.3)
                raise RuntimeError(f"List is too small: {len(seq)} < {need}")
        d = self._ptr_array(dsts, n)
        s = self._ptr_array(srcs, n)
        z = _size_list("sizes", sizes, n)
        attr_type = self.cudaMemcpyAttributes
        head = list(attrs)[:na]
        # docs/cuda-runtime.md §5.3: wrong types
        if not all(isinstance(a, attr_type) for a in head):
            raise TypeError("Argument 'attrs' is not instance of type (expected "
                            "tuple[cyruntime.cudaMemcpyAttributes,] or "
                            "list[cyruntime.cudaMemcpyAttributes,]")
        orders = [int(a.srcAccessOrder) for a in head]
        idxs = [int(i) for i in _size_list("attrsIdxs", list(attrsIdxs), na)]
        code, fail_idx = self._kvreg_runtime.memcpy_batch_async(
            d, s, z, n, orders, idxs, na, _stream(stream))
        err = self._as_error(code)
        if self.bindings_major == 12:
            return err, (None if code else fail_idx)
        return (err,)

    @staticmethod
    def _ptr_array(values: Sequence[Any] | np.ndarray, n: int) -> np.ndarray:
        if isinstance(values, np.ndarray):
            return values[:n].astype(np.uint64, copy=False)
        head = values[:n]
        try:
            return np.fromiter(head, np.uint64, n)
        except (TypeError, OverflowError, ValueError):
            return np.array([pointer_arg(v) for v in head], np.uint64)

    def _kvreg_check_args(self, api: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Raise what the binding raises for these arguments, before a fault can fire."""
        converters = _ARG_CHECKS.get(api)
        if converters is None:
            return
        if len(args) != len(converters) or kwargs:
            raise TypeError(f"{api}() takes exactly {len(converters)} positional argument"
                            f"{'s' if len(converters) != 1 else ''} ({len(args)} given)")
        for value, convert in zip(args, converters, strict=True):
            convert(value)

    # -- everything else -----------------------------------------------------------------------
    def __dir__(self) -> list[str]:
        """The real module's public names, modelled or not (feature probes read ``dir()``)."""
        names = public_names("runtime")
        if self.__dict__.get("_real") is None:   # only what this face can answer
            names = frozenset(n for n in names if hasattr(self, n))
        return sorted(names | {"__doc__", "__name__", "__spec__", "__loader__",
                               "__package__"})

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        real = self.__dict__.get("_real")
        if name in HOST_ONLY_HELPERS:
            # host-only helpers need no driver: the real binding's answer is the true one
            helper = getattr(real, name, None) if real is not None else None
            if helper is None:
                helper = not_modelled_stub(
                    _NAME, name, reason=f"{_NAME}.{name} is passed through to the real "
                    "binding, and cuda-bindings is not installed")
            self.__dict__[name] = helper
            return helper
        if real is not None and hasattr(real, name):
            value = getattr(real, name)
            if not callable(value) or isinstance(value, type) or \
                    getattr(value, "__module__", "") == "typing":
                return value   # constants, types and modules are safe to share
        elif real is not None or snapshot_names("runtime").get(name) != "function":
            raise AttributeError(f"module '{_NAME}' has no attribute '{name}'")
        stub = not_modelled_stub(_NAME, name)
        self.__dict__[name] = stub
        return stub


_NAME = "cuda.bindings.runtime"


def _size(value: Any) -> int:
    return unsigned_arg(value, _U64, "size_t")


def _uint(value: Any) -> int:
    return unsigned_arg(value, _U32, "unsigned int")


def _int_like(value: Any) -> int:
    return int(value)


# per-API argument conversions, in order (docs/cuda-runtime.md §9 conversion rules)
_ARG_CHECKS: dict[str, tuple[Any, ...]] = {
    "cudaHostRegister": (pointer_arg, _size, _uint), "cudaHostUnregister": (pointer_arg,),
    "cudaHostAlloc": (_size, _uint), "cudaMallocHost": (_size,), "cudaFreeHost": (pointer_arg,),
    "cudaMalloc": (_size,), "cudaFree": (pointer_arg,), "cudaPointerGetAttributes": (pointer_arg,),
    "cudaHostGetDevicePointer": (pointer_arg, _uint), "cudaHostGetFlags": (pointer_arg,),
    "cudaStreamDestroy": (_stream,), "cudaStreamSynchronize": (_stream,),
    "cudaMemcpyAsync": (pointer_arg, pointer_arg, _size, _int_like, _stream),
    "cudaSetDevice": (_int_like,), "cudaDeviceGetAttribute": (_int_like, _int_like),
}
