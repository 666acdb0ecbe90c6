"""The ``cuda.bindings.driver`` face: cuMemHostRegister and friends over the fake driver.

Some registration code goes through the driver API because it leaves the runtime's
last-error state alone (docs/cuda-runtime.md §6, local-inference-lab/vllm PR #217). This face
shares the :class:`~kvreg.fakes.cuda.cuda_driver.FakeDriver` with the runtime faces, so a range
registered here is registered for torch and cuda-python too (712 on a duplicate,
docs/cuda-runtime.md §6
[INF]), and it has no last-error slot at all. Conventions are the binding's: tuple returns
``(CUresult, outputs...)`` with None outputs on error, ``CUresult`` enums, ``CUdeviceptr``
for device addresses. ``dir()`` lists every name of the real module; the calls below are
modelled, any other raises :class:`NotModelledError`.

Modelled rules: ``cuInit(0)`` first, or every call gives CUDA_ERROR_NOT_INITIALIZED (3)
[DOC: cuda.h, "cuInit must be called before any other function"]; a runtime call that needs a
context (``cudaFree(0)``, ``cudaHostRegister``, ... through any face) initialises the driver for
the process as well [DOC: CUDA Runtime API, "Interactions with the CUDA Driver API"]. Memory
calls need a context current on the calling thread, or give CUDA_ERROR_INVALID_CONTEXT (201):
``cuInit`` makes none current; the runtime makes the primary context current on each thread
it is called on, and driver code makes one current with ``cuDevicePrimaryCtxRetain`` +
``cuCtxSetCurrent`` / ``cuCtxPushCurrent`` (docs/cuda-runtime.md §13). With no driver the
binding cannot load ``libcuda`` and raises on the first call (observed with cuda-bindings
13.5.0 and no driver; a test compares the two where that is the machine); with no GPU cuInit
gives CUDA_ERROR_NO_DEVICE (100); with the stub library every call gives
CUDA_ERROR_STUB_LIBRARY (34) [DOC enum comments].
"""

from __future__ import annotations

import enum
import functools
import threading
import types
from typing import Any

from ..faults import register_points
from . import errors as E
from .cuda_driver import FakeDriver
from .cuda_python_face import pointer_arg, unsigned_arg
from .device_memory import device_range
from .driver_memory_face import MEMORY_OUTPUTS, NOT_FOUND, DeviceMemoryCalls
from .symbols import NotModelledError, not_modelled_stub, public_names, real_module, snapshot_names

__all__ = ["DRIVER_OUTPUTS", "DRIVER_POINTS", "INVALID_CONTEXT", "RUNTIME_TWINS", "CudaDriverFace",
           "DriverLibraryMissing"]

_NAME = "cuda.bindings.driver"
INVALID_CONTEXT = 201   # CUDA_ERROR_INVALID_CONTEXT (cuda.h) [DOC]
_U64 = 1 << 64
_U32 = 1 << 32

# number of output slots after the CUresult, per modelled API
DRIVER_OUTPUTS: dict[str, int] = {
    "cuInit": 0, "cuDriverGetVersion": 1, "cuDeviceGetCount": 1, "cuDeviceGet": 1,
    "cuMemHostRegister": 0, "cuMemHostUnregister": 0, "cuMemHostGetFlags": 1,
    "cuMemHostGetDevicePointer": 1, "cuPointerGetAttribute": 1, "cuGetErrorName": 1,
    "cuGetErrorString": 1, "cuDevicePrimaryCtxRetain": 1, "cuDevicePrimaryCtxRelease": 0,
    "cuCtxSetCurrent": 0, "cuCtxGetCurrent": 1, "cuCtxPushCurrent": 0, "cuCtxPopCurrent": 1,
    "cuCtxGetDevice": 1, **MEMORY_OUTPUTS,
}

# fault points of this face, with the codes each call documents (cuda.h) [DOC]
_COMMON = frozenset({E.INITIALIZATION_ERROR, E.CUDART_UNLOADING, INVALID_CONTEXT})
DRIVER_POINTS: dict[str, frozenset[int] | None] = {
    "cudriver.cuMemHostRegister": _COMMON | {E.INVALID_VALUE, E.MEMORY_ALLOCATION,
                                            E.HOST_MEMORY_ALREADY_REGISTERED, E.NOT_PERMITTED,
                                            E.NOT_SUPPORTED},
    "cudriver.cuMemHostUnregister": _COMMON | {E.INVALID_VALUE, E.MEMORY_ALLOCATION,
                                              E.HOST_MEMORY_NOT_REGISTERED},
    "cudriver.cuMemHostGetFlags": _COMMON | {E.INVALID_VALUE},
    "cudriver.cuMemHostGetDevicePointer": _COMMON | {E.INVALID_VALUE},
    "cudriver.cuPointerGetAttribute": _COMMON | {E.INVALID_VALUE, 101},
}
register_points(DRIVER_POINTS)

# cudaHostRegister is a thin wrapper of its driver twin (docs/cuda-runtime.md §2.1): a fault plan
# written for the runtime point also fails the driver call, unless the plan names cudriver points
RUNTIME_TWINS = {"cuMemHostRegister": "cudart.cudaHostRegister",
                 "cuMemHostUnregister": "cudart.cudaHostUnregister"}

# CUpointer_attribute numbers (cuda.h) [DOC]
_PA_MEMORY_TYPE, _PA_DEVICE_POINTER, _PA_HOST_POINTER, _PA_IS_MANAGED = 2, 3, 4, 8
_PA_DEVICE_ORDINAL, _PA_RANGE_START, _PA_RANGE_SIZE, _PA_MAPPED = 9, 11, 12, 13
_PA_BUFFER_ID, _PA_GPU_DIRECT_RDMA_CAPABLE = 7, 15
_PA_MODELLED = frozenset({_PA_MEMORY_TYPE, _PA_DEVICE_POINTER, _PA_HOST_POINTER, _PA_IS_MANAGED,
                          _PA_DEVICE_ORDINAL, _PA_RANGE_START, _PA_RANGE_SIZE, _PA_MAPPED,
                          _PA_BUFFER_ID, _PA_GPU_DIRECT_RDMA_CAPABLE})
_MEMORYTYPE_HOST, _MEMORYTYPE_DEVICE = 1, 2


class DriverLibraryMissing(RuntimeError):
    """Stands for cuda-pathfinder's error when the real one is not importable."""


def _library_missing_error() -> type[Exception]:
    try:
        from cuda.pathfinder import DynamicLibNotFoundError
    except ImportError:
        return DriverLibraryMissing
    error: type[Exception] = DynamicLibNotFoundError
    return error


def _int_enum(name: str, members: dict[str, int]) -> Any:
    """An IntEnum built at run time (mypy cannot follow the functional API's members)."""
    return enum.IntEnum(name, members)


@functools.cache
def _fallback_types() -> dict[str, Any]:
    """Stand-ins for the binding's enums and handle types when cuda-bindings is absent
    (built once: the same types for every face, as the real module's are)."""
    names = {0: "CUDA_SUCCESS", 1: "CUDA_ERROR_INVALID_VALUE", 2: "CUDA_ERROR_OUT_OF_MEMORY",
             3: "CUDA_ERROR_NOT_INITIALIZED", 4: "CUDA_ERROR_DEINITIALIZED",
             34: "CUDA_ERROR_STUB_LIBRARY", 100: "CUDA_ERROR_NO_DEVICE",
             101: "CUDA_ERROR_INVALID_DEVICE", 201: "CUDA_ERROR_INVALID_CONTEXT",
             700: "CUDA_ERROR_ILLEGAL_ADDRESS",
             712: "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
             713: "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED", 800: "CUDA_ERROR_NOT_PERMITTED",
             801: "CUDA_ERROR_NOT_SUPPORTED", 999: "CUDA_ERROR_UNKNOWN",
             NOT_FOUND: "CUDA_ERROR_NOT_FOUND"}
    result = _int_enum("CUresult", {v: k for k, v in names.items()})
    attribute = _int_enum("CUpointer_attribute", {
        "CU_POINTER_ATTRIBUTE_MEMORY_TYPE": 2, "CU_POINTER_ATTRIBUTE_DEVICE_POINTER": 3,
        "CU_POINTER_ATTRIBUTE_HOST_POINTER": 4, "CU_POINTER_ATTRIBUTE_IS_MANAGED": 8,
        "CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL": 9, "CU_POINTER_ATTRIBUTE_RANGE_START_ADDR": 11,
        "CU_POINTER_ATTRIBUTE_RANGE_SIZE": 12, "CU_POINTER_ATTRIBUTE_MAPPED": 13})

    class _Handle:
        kind = "handle"

        def __init__(self, init_value: int = 0) -> None:
            self._v = int(init_value)

        def __int__(self) -> int:
            return self._v

        def getPtr(self) -> int:
            return self._v

        def __repr__(self) -> str:
            return f"<{type(self).__name__} {self._v}>"

    class CUdeviceptr(_Handle):
        pass

    class CUdevice(_Handle):
        pass

    class CUcontext(_Handle):
        pass

    class CUmemGenericAllocationHandle(_Handle):
        pass

    return {"CUresult": result, "CUpointer_attribute": attribute, "CUdeviceptr": CUdeviceptr,
            "CUdevice": CUdevice, "CUcontext": CUcontext,
            "CUmemGenericAllocationHandle": CUmemGenericAllocationHandle,
            "CU_MEMHOSTREGISTER_PORTABLE": 1,
            "CU_MEMHOSTREGISTER_DEVICEMAP": 2, "CU_MEMHOSTREGISTER_IOMEMORY": 4,
            "CU_MEMHOSTREGISTER_READ_ONLY": 8}


_TYPE_NAMES = ("CUresult", "CUpointer_attribute", "CUdeviceptr", "CUdevice", "CUcontext",
               "CUmemGenericAllocationHandle")


class CudaDriverFace(DeviceMemoryCalls, types.ModuleType):
    """What ``from cuda.bindings import driver`` gives under the fake."""

    _kvreg_fake_module = True

    def __init__(self, driver: FakeDriver, *, use_real_types: bool = True) -> None:
        super().__init__(_NAME, "cuda-python driver API (kvreg fake)")
        self._kvreg_driver = driver
        real = real_module("driver") if use_real_types else None
        found = ({n: getattr(real, n) for n in _TYPE_NAMES} if real is not None
                 else _fallback_types())
        self.__dict__.update(found)
        self._real = real
        self._init_lock = threading.Lock()

    # -- helpers ---------------------------------------------------------------------------
    def _r(self, code: int) -> Any:
        return self.CUresult(code)

    def _ready(self) -> int:
        """0 once cuInit succeeded; otherwise the code every call returns (see module doc)."""
        env = self._kvreg_driver.profile.env
        if env == "no_driver":
            raise _library_missing_error()(
                '"cuda" is an NVIDIA driver library and can only be found via system search. '
                "Ensure the NVIDIA display driver is installed.")
        if env == "stub":
            return E.STUB_LIBRARY
        if not self._kvreg_driver.initialised:
            return E.INITIALIZATION_ERROR       # CUDA_ERROR_NOT_INITIALIZED (3)
        return self._kvreg_driver.sticky_error

    def _ready_ctx(self) -> int:
        """As :meth:`_ready`, for a call that needs a current context: 201 on a thread with
        none (cuda.h lists CUDA_ERROR_INVALID_CONTEXT for each such call) [DOC]."""
        code = self._ready()
        if code:
            return code
        return 0 if self._kvreg_driver.contexts.current() else INVALID_CONTEXT

    def _device_arg(self, dev: Any) -> int | None:
        """A CUdevice (or int) ordinal; None when the device does not exist."""
        n = int(dev)
        return n if 0 <= n < self._kvreg_driver.profile.device_count else None

    def _context_arg(self, ctx: Any) -> int | None:
        """A CUcontext (or int, or None for NULL) as a handle: 0 for NULL, None for a value
        that is no context of this process."""
        handle = 0 if ctx is None else int(ctx)
        if handle == 0:
            return 0
        device = self._kvreg_driver.contexts.device_of(handle)
        return handle if device is not None and self._device_arg(device) is not None else None

    # -- initialisation and devices -------------------------------------------------------
    def cuInit(self, Flags: Any) -> tuple[Any]:
        """Flags must be 0; no GPU -> 100, stub library -> 34 (docs/cuda-runtime.md §2.2, §11.4)."""
        flags = unsigned_arg(Flags, _U32, "unsigned int")
        env = self._kvreg_driver.profile.env
        if env == "no_driver":
            self._ready()
        if env == "stub":
            return (self._r(E.STUB_LIBRARY),)
        if env == "no_gpu":
            return (self._r(E.NO_DEVICE),)
        if flags != 0:
            return (self._r(E.INVALID_VALUE),)
        with self._init_lock:
            self._kvreg_driver.initialised = True
        return (self._r(0),)

    def cuDriverGetVersion(self) -> tuple[Any, int | None]:
        """Needs no cuInit; the profile's driver version."""
        if self._kvreg_driver.profile.env == "no_driver":
            self._ready()
        return self._r(0), self._kvreg_driver.profile.driver_version

    def cuDeviceGetCount(self) -> tuple[Any, int | None]:
        """The profile's device count, after cuInit."""
        code = self._ready()
        return (self._r(code), None) if code else \
            (self._r(0), self._kvreg_driver.profile.device_count)

    def cuDeviceGet(self, ordinal: Any) -> tuple[Any, Any]:
        """A CUdevice handle; an ordinal out of range -> 101."""
        code = self._ready()
        if code:
            return self._r(code), None
        n = int(ordinal)
        if not 0 <= n < self._kvreg_driver.profile.device_count:
            return self._r(E.INVALID_DEVICE), None
        return self._r(0), self.CUdevice(n)

    # -- contexts (docs/cuda-runtime.md §13) -------------------------------------------------
    def cuDevicePrimaryCtxRetain(self, dev: Any) -> tuple[Any, Any]:
        """The device's primary context, one retain more; not made current [DOC]."""
        code = self._ready()
        if code:
            return self._r(code), None
        device = self._device_arg(dev)
        if device is None:
            return self._r(E.INVALID_DEVICE), None
        return self._r(0), self.CUcontext(self._kvreg_driver.contexts.retain(device))

    def cuDevicePrimaryCtxRelease(self, dev: Any) -> tuple[Any]:
        """One retain less; releasing one that holds none -> 201 [INF]."""
        code = self._ready()
        if code:
            return (self._r(code),)
        device = self._device_arg(dev)
        if device is None:
            return (self._r(E.INVALID_DEVICE),)
        released = self._kvreg_driver.contexts.release(device)
        return (self._r(0 if released else INVALID_CONTEXT),)

    def cuCtxSetCurrent(self, ctx: Any) -> tuple[Any]:
        """Replaces the top of the thread's context stack; NULL pops it [DOC]."""
        code = self._ready()
        if code:
            return (self._r(code),)
        handle = self._context_arg(ctx)
        if handle is None:
            return (self._r(INVALID_CONTEXT),)
        self._kvreg_driver.contexts.set_current(handle)
        return (self._r(0),)

    def cuCtxGetCurrent(self) -> tuple[Any, Any]:
        """The thread's current context; a NULL CUcontext (and success) when it has none [DOC]."""
        code = self._ready()
        if code:
            return self._r(code), None
        return self._r(0), self.CUcontext(self._kvreg_driver.contexts.current())

    def cuCtxPushCurrent(self, ctx: Any) -> tuple[Any]:
        """Pushes a context on the thread's stack (it becomes current); NULL -> 201 [INF]."""
        code = self._ready()
        if code:
            return (self._r(code),)
        handle = self._context_arg(ctx)
        if not handle:
            return (self._r(INVALID_CONTEXT),)
        self._kvreg_driver.contexts.stack().append(handle)
        return (self._r(0),)

    def cuCtxPopCurrent(self) -> tuple[Any, Any]:
        """Pops the thread's current context; an empty stack -> 201 [DOC]."""
        code = self._ready()
        if code:
            return self._r(code), None
        stack = self._kvreg_driver.contexts.stack()
        if not stack:
            return self._r(INVALID_CONTEXT), None
        return self._r(0), self.CUcontext(stack.pop())

    def cuCtxGetDevice(self) -> tuple[Any, Any]:
        """The device of the current context; none current -> 201 [DOC]."""
        code = self._ready_ctx()
        if code:
            return self._r(code), None
        device = self._kvreg_driver.contexts.device_of(self._kvreg_driver.contexts.current())
        return self._r(0), self.CUdevice(device or 0)

    def cuGetErrorName(self, error: Any) -> tuple[Any, bytes | None]:
        """The CUresult name; an unknown code -> (1, None)."""
        self._ready_for_strings()
        try:
            member = self.CUresult(int(error))
        except ValueError:
            return self._r(E.INVALID_VALUE), None
        return self._r(0), member.name.encode()

    def cuGetErrorString(self, error: Any) -> tuple[Any, bytes | None]:
        """The error text (the runtime's strings for the shared codes, docs/cuda-runtime.md §1)."""
        self._ready_for_strings()
        try:
            self.CUresult(int(error))
        except ValueError:
            return self._r(E.INVALID_VALUE), None
        return self._r(0), E.error_string(int(error)).encode()

    def _ready_for_strings(self) -> None:
        if self._kvreg_driver.profile.env == "no_driver":
            self._ready()

    # -- registration (docs/cuda-runtime.md §2, §3, §6) --------------------------------------------
    def cuMemHostRegister(self, p: Any, bytesize: Any, Flags: Any) -> tuple[Any]:
        """The runtime's rules (712, 1, 2, 801, 800) at driver level; no context -> 201."""
        ptr = pointer_arg(p)
        size = unsigned_arg(bytesize, _U64, "size_t")
        flags = unsigned_arg(Flags, _U32, "unsigned int")
        code = self._ready_ctx()
        if code:
            return (self._r(code),)
        return (self._r(self._kvreg_driver.host_register(ptr, size, flags)),)

    def cuMemHostUnregister(self, p: Any) -> tuple[Any]:
        """Exact base -> 0; interior -> 1; unknown or twice -> 713 (docs/cuda-runtime.md §3)."""
        ptr = pointer_arg(p)
        code = self._ready_ctx()
        if code:
            return (self._r(code),)
        return (self._r(self._kvreg_driver.host_unregister(ptr)),)

    def cuMemHostGetFlags(self, p: Any) -> tuple[Any, int | None]:
        """Flags of pinned memory; registered memory per profile [UNC] (docs/cuda-runtime.md §4)."""
        ptr = pointer_arg(p)
        code = self._ready_ctx()
        if code:
            return self._r(code), None
        driver = self._kvreg_driver
        entry = driver.pinned.containing(ptr)
        if entry is None or (entry.kind == "register" and
                             driver.profile.host_get_flags_on_registered == "invalid"):
            return self._r(E.INVALID_VALUE), None
        return self._r(0), entry.flags

    def cuMemHostGetDevicePointer(self, p: Any, Flags: Any) -> tuple[Any, Any]:
        """The device alias (== host VA unless attribute 91 is 0); Flags must be 0 (§4)."""
        ptr = pointer_arg(p)
        flags = unsigned_arg(Flags, _U32, "unsigned int")
        code = self._ready_ctx()
        if code:
            return self._r(code), None
        entry = self._kvreg_driver.pinned.containing(ptr)
        if flags != 0 or entry is None:
            return self._r(E.INVALID_VALUE), None
        return self._r(0), self.CUdeviceptr(entry.alias + (ptr - entry.base))

    def cuPointerGetAttribute(self, attribute: Any, ptr: Any) -> tuple[Any, Any]:
        """Host and device memory, VMM ranges (§14.1); unregistered host memory -> 1 [DOC]."""
        attr = int(attribute)
        address = pointer_arg(ptr)
        code = self._ready_ctx()
        if code:
            return self._r(code), None
        if attr not in _PA_MODELLED:
            raise NotModelledError(
                f"{_NAME}.cuPointerGetAttribute attribute {attr} is not modelled by kvreg's "
                "fake; see COVERAGE.md")
        driver = self._kvreg_driver
        dev = device_range(driver, address)
        if dev is not None:
            # docs/cuda-runtime.md §14.1: RANGE_START/SIZE are the block, or the whole
            # cuMemAddressReserve range of a VMM mapping [DOC]; BUFFER_ID unique [DOC]
            values: dict[int, Any] = {
                _PA_MEMORY_TYPE: _MEMORYTYPE_DEVICE, _PA_DEVICE_POINTER: self.CUdeviceptr(address),
                _PA_HOST_POINTER: None, _PA_IS_MANAGED: False, _PA_DEVICE_ORDINAL: dev.device,
                _PA_RANGE_START: self.CUdeviceptr(dev.range_base), _PA_RANGE_SIZE: dev.range_size,
                _PA_MAPPED: True, _PA_BUFFER_ID: dev.buffer_id,
                _PA_GPU_DIRECT_RDMA_CAPABLE: dev.rdma_capable}
        else:
            entry = driver.pinned.containing(address)
            if entry is None:
                # "not allocated by, mapped by, or registered with a CUcontext" -> 1 [DOC]
                return self._r(E.INVALID_VALUE), None
            off = address - entry.base
            values = {
                _PA_MEMORY_TYPE: _MEMORYTYPE_HOST,
                _PA_DEVICE_POINTER: self.CUdeviceptr(entry.alias + off),
                _PA_HOST_POINTER: address, _PA_IS_MANAGED: False,
                _PA_DEVICE_ORDINAL: entry.device,
                _PA_RANGE_START: self.CUdeviceptr(entry.base), _PA_RANGE_SIZE: entry.size,
                _PA_MAPPED: True}
            if attr not in values:     # buffer ids of pinned host memory: not modelled
                raise NotModelledError(
                    f"{_NAME}.cuPointerGetAttribute attribute {attr} of host memory is not "
                    "modelled by kvreg's fake; see COVERAGE.md")
        value = values[attr]
        if value is None:             # a host pointer of device memory
            return self._r(E.INVALID_VALUE), None
        return self._r(0), value

    # -- everything else -------------------------------------------------------------------
    def __dir__(self) -> list[str]:
        """The real module's public names, modelled or not (feature probes read ``dir()``)."""
        names = public_names("driver")
        if self.__dict__.get("_real") is None:   # only what this face can answer
            names = frozenset(n for n in names if hasattr(self, n))
        return sorted(names | {"__doc__", "__name__", "__spec__", "__loader__",
                               "__package__"})

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        real = self.__dict__.get("_real")
        if real is not None and hasattr(real, name):
            value = getattr(real, name)
            if not callable(value) or isinstance(value, type) or \
                    getattr(value, "__module__", "") == "typing":
                return value
        elif real is not None or snapshot_names("driver").get(name) != "function":
            if real is None and name in _fallback_types():
                return _fallback_types()[name]
            raise AttributeError(f"module '{_NAME}' has no attribute '{name}'")
        stub = not_modelled_stub(_NAME, name)
        self.__dict__[name] = stub
        return stub
