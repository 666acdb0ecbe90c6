"""The ``torch.cuda.cudart()`` face: a stand-in for torch's pybind11 ``torch._C._cudart``.

Exact to the original (docs/cuda-runtime.md §7): results are a pybind11-style enum that
compares equal to ints, is **always truthy** (``if err:`` is a bug the fake must not hide),
prints unnamed codes as ``cudaError.???``, and is not an int subclass. Arguments are
converted as pybind11 does: negative ints, ints of 2**64 or more, floats and None raise
TypeError, and nothing in the fake changes.
"""

from __future__ import annotations

import ctypes
import types
from typing import TYPE_CHECKING, Any, ClassVar

from . import errors as E
from .cuda_runtime import FakeRuntime

__all__ = ["TorchCudaError", "TorchCudartFace"]

_MODULE = "torch._C._cudart"


class _CudaErrorMeta(type):
    """Class-level behaviour of the pybind11 enum: ``cudaError.success``, ``__members__``."""

    @property
    def __members__(cls) -> dict[str, TorchCudaError]:
        return {"success": TorchCudaError(0)}

    @property
    def success(cls) -> TorchCudaError:
        return TorchCudaError(0)


class TorchCudaError(metaclass=_CudaErrorMeta):
    """``torch._C._cudart.cudaError``: only ``success`` is a named member.

    See docs/cuda-runtime.md §7.
    """

    __slots__ = ("_value",)
    _value: int
    _cache: ClassVar[dict[int, TorchCudaError]] = {}

    def __new__(cls, value: Any) -> TorchCudaError:
        hit = cls._cache.get(value) if type(value) is int else None
        if hit is not None:
            return hit
        if isinstance(value, TorchCudaError):
            return value
        if isinstance(value, float) or not hasattr(value, "__index__"):
            raise TypeError(
                "__init__(): incompatible constructor arguments. The following argument types "
                f"are supported:\n    1. {_MODULE}.cudaError(value: int)\n\n"
                f"Invoked with: {value!r}")
        code = int(value.__index__())
        hit = cls._cache.get(code)
        if hit is None:
            hit = object.__new__(cls)
            hit._value = code
            cls._cache[code] = hit
        return hit

    @property
    def value(self) -> int:
        return self._value

    @property
    def name(self) -> str:
        return "success" if self._value == 0 else "???"

    def __int__(self) -> int:
        return self._value

    def __index__(self) -> int:
        return self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, TorchCudaError):
            return self._value == other._value
        if isinstance(other, int):
            return self._value == other
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __repr__(self) -> str:
        return f"<cudaError.{self.name}: {self._value}>"

    def __str__(self) -> str:
        return f"cudaError.{self.name}"

    def __getstate__(self) -> int:
        return self._value


_U64 = 1 << 64
_U32 = 1 << 32
# the enum objects by code, filled by the constructor and read directly on the hot paths
# (a member is always truthy, so ``get(code) or TorchCudaError(code)`` is exact)
_ENUMS = TorchCudaError._cache


def _convert(fn: str, sig: str, values: tuple[Any, ...], limits: tuple[int, ...]) -> list[int]:
    """pybind11's integer casters: int or __index__, in range, never float or None."""
    out = []
    for v, limit in zip(values, limits, strict=True):
        if type(v) is int and 0 <= v < limit:   # the common case, checked first
            out.append(v)
            continue
        ok = not isinstance(v, float) and v is not None and hasattr(v, "__index__")
        n = int(v.__index__()) if ok else -1
        if not ok or not 0 <= n < limit:
            shown = ", ".join(repr(x) for x in values)
            raise TypeError(
                f"{fn}(): incompatible function arguments. The following argument types are "
                f"supported:\n    1. {sig}\n\nInvoked with: {shown}")
        out.append(n)
    return out


class TorchCudartFace(types.ModuleType):
    """What the fake's ``torch.cuda.cudart()`` returns."""

    cudaError = TorchCudaError

    def __init__(self, runtime: FakeRuntime) -> None:
        super().__init__(_MODULE, "libcudart.so bindings (kvreg fake)")
        self._kvreg_runtime = runtime
        self.stream_slots: dict[int, int] = {}

    def cudaHostRegister(self, ptr: Any, size: Any, flags: Any) -> TorchCudaError:
        if type(ptr) is int and type(size) is int and type(flags) is int and \
                0 <= ptr < _U64 and 0 <= size < _U64 and 0 <= flags < _U32:   # hot path
            code = self._kvreg_runtime.host_register(ptr, size, flags)
            return _ENUMS.get(code) or TorchCudaError(code)
        p, s, f = _convert("cudaHostRegister",
                           f"(arg0: int, arg1: int, arg2: int) -> {_MODULE}.cudaError",
                           (ptr, size, flags), (_U64, _U64, _U32))
        return TorchCudaError(self._kvreg_runtime.host_register(p, s, f))

    def cudaHostUnregister(self, ptr: Any) -> TorchCudaError:
        if type(ptr) is int and 0 <= ptr < _U64:   # hot path
            code = self._kvreg_runtime.host_unregister(ptr)
            return _ENUMS.get(code) or TorchCudaError(code)
        (p,) = _convert("cudaHostUnregister", f"(arg0: int) -> {_MODULE}.cudaError",
                        (ptr,), (_U64,))
        return TorchCudaError(self._kvreg_runtime.host_unregister(p))

    def cudaGetErrorString(self, err: Any) -> str:
        if not isinstance(err, TorchCudaError):   # a plain int raises (docs/cuda-runtime.md §7)
            raise TypeError(
                "cudaGetErrorString(): incompatible function arguments. The following argument "
                f"types are supported:\n    1. (arg0: {_MODULE}.cudaError) -> str\n\n"
                f"Invoked with: {err!r}")
        return E.error_string(err.value)

    def cudaStreamCreate(self, ptr: Any) -> TorchCudaError:
        (slot,) = _convert("cudaStreamCreate", f"(arg0: int) -> {_MODULE}.cudaError",
                           (ptr,), (_U64,))
        code, handle = self._kvreg_runtime.stream_create()
        if code == 0 and handle is not None:
            self.stream_slots[slot] = handle
            owner = self._kvreg_runtime.driver.space.owner(slot)
            if owner is not None and owner[0].kind == "real" and owner[0].end - slot >= 8:
                ctypes.c_uint64.from_address(slot).value = handle  # the cudaStream_t slot
        return TorchCudaError(code)

    def cudaStreamDestroy(self, stream: Any) -> TorchCudaError:
        (h,) = _convert("cudaStreamDestroy", f"(arg0: int) -> {_MODULE}.cudaError",
                        (stream,), (_U64,))
        return TorchCudaError(self._kvreg_runtime.stream_destroy(h))

    def cudaMemGetInfo(self, device: Any) -> tuple[int, int]:
        (dev,) = _convert("cudaMemGetInfo", "(arg0: int) -> tuple[int, int]", (device,), (_U32,))
        code, free, total = self._kvreg_runtime.mem_get_info(dev)
        if code:   # C10_CUDA_CHECK raises (docs/cuda-runtime.md §7)
            raise RuntimeError(f"CUDA error: {E.error_string(code)}")
        assert free is not None and total is not None
        return free, total

    def cudaProfilerStart(self) -> TorchCudaError:
        return TorchCudaError(self._kvreg_runtime._init_error())

    def cudaProfilerStop(self) -> TorchCudaError:
        return TorchCudaError(self._kvreg_runtime._init_error())

    def _kvreg_check_args(self, api: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Raise what the call itself would raise for these arguments (before a fault fires).

        The recorder calls this before it consults the fault plan, so an armed fault never
        answers a call the real binding rejects with TypeError.
        """
        if api == "cudaGetErrorString":
            if len(args) != 1 or kwargs or not isinstance(args[0], TorchCudaError):
                self.cudaGetErrorString(*args, **kwargs)   # raises the binding's TypeError
            return
        limits = _ARG_LIMITS.get(api)
        if limits is None:
            return
        if not kwargs and len(args) == len(limits) and all(
                type(v) is int and 0 <= v < limit for v, limit in zip(args, limits, strict=True)):
            return   # plain ints in range: nothing to raise (the signature text is for errors)
        sig = f"({', '.join(f'arg{i}: int' for i in range(len(limits)))})"
        if len(args) != len(limits) or kwargs:
            shown = ", ".join(repr(a) for a in args)
            raise TypeError(f"{api}(): incompatible function arguments. The following argument "
                            f"types are supported:\n    1. {sig}\n\nInvoked with: {shown}")
        _convert(api, sig, args, limits)

    if TYPE_CHECKING:
        # At run time a missing name gets the module type's own "module 'torch._C._cudart'
        # has no attribute ..." error: a class __getattr__ would slow every hit.
        def __getattr__(self, name: str) -> Any: ...


_ARG_LIMITS: dict[str, tuple[int, ...]] = {
    "cudaHostRegister": (_U64, _U64, _U32), "cudaHostUnregister": (_U64,),
    "cudaStreamCreate": (_U64,), "cudaStreamDestroy": (_U64,), "cudaMemGetInfo": (_U32,),
    "cudaProfilerStart": (), "cudaProfilerStop": (),
}
