"""The CUDA runtime error table: one source for codes, names and strings.

Values, names and texts follow docs/cuda-runtime.md §1 ([DOC] + [OBS-local]); a conformance
test checks them against ``cuda.bindings.runtime.cudaError_t`` when it is installed. The
per-API sets say which codes each API can really return (docs/cuda-runtime.md §2.1, §3, §4, §5), so
a fault
plan cannot make ``cudaHostUnregister`` fail with "out of memory".
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = [
    "API_ERRORS",
    "ERRORS",
    "INIT_ERRORS",
    "CudaErrorInfo",
    "error_name",
    "error_string",
    "valid_errors",
]

# code -> (name, string)
ERRORS: dict[int, tuple[str, str]] = {
    0: ("cudaSuccess", "no error"),
    1: ("cudaErrorInvalidValue", "invalid argument"),
    2: ("cudaErrorMemoryAllocation", "out of memory"),
    3: ("cudaErrorInitializationError", "initialization error"),
    4: ("cudaErrorCudartUnloading", "driver shutting down"),
    16: ("cudaErrorInvalidHostPointer", "invalid host pointer"),
    17: ("cudaErrorInvalidDevicePointer", "invalid device pointer"),
    21: ("cudaErrorInvalidMemcpyDirection", "invalid copy direction for memcpy"),
    34: ("cudaErrorStubLibrary", "CUDA driver is a stub library"),
    35: (
        "cudaErrorInsufficientDriver",
        "CUDA driver version is insufficient for CUDA runtime version",
    ),
    36: (
        "cudaErrorCallRequiresNewerDriver",
        "API call is not supported in the installed CUDA driver",
    ),
    46: ("cudaErrorDevicesUnavailable", "CUDA-capable device(s) is/are busy or unavailable"),
    100: ("cudaErrorNoDevice", "no CUDA-capable device is detected"),
    101: ("cudaErrorInvalidDevice", "invalid device ordinal"),
    201: ("cudaErrorDeviceUninitialized", "invalid device context"),
    304: ("cudaErrorOperatingSystem", "OS call failed or operation not supported on this OS"),
    400: ("cudaErrorInvalidResourceHandle", "invalid resource handle"),
    600: ("cudaErrorNotReady", "device not ready"),
    700: ("cudaErrorIllegalAddress", "an illegal memory access was encountered"),
    712: (
        "cudaErrorHostMemoryAlreadyRegistered",
        "part or all of the requested memory range is already mapped",
    ),
    713: (
        "cudaErrorHostMemoryNotRegistered",
        "pointer does not correspond to a registered memory region",
    ),
    719: ("cudaErrorLaunchFailure", "unspecified launch failure"),
    800: ("cudaErrorNotPermitted", "operation not permitted"),
    801: ("cudaErrorNotSupported", "operation not supported"),
    802: ("cudaErrorSystemNotReady", "system not yet initialized"),
    803: (
        "cudaErrorSystemDriverMismatch",
        "system has unsupported display driver / cuda driver combination",
    ),
    804: (
        "cudaErrorCompatNotSupportedOnDevice",
        "forward compatibility was attempted on non supported HW",
    ),
    999: ("cudaErrorUnknown", "unknown error"),
}

UNRECOGNIZED = "unrecognized error code"  # docs/cuda-runtime.md §1, last row [OBS-local]


def _load_full_table() -> dict[int, tuple[str, str]]:
    """Every cudaError_t member with its string, read from cuda-bindings into data/ once.

    The spec's table above holds the codes registration code meets; the full table lets
    ``cudaGetErrorString(5)`` answer as the real runtime does instead of "unrecognized".
    """
    from importlib import resources

    text = resources.files("kvreg.fakes.cuda").joinpath("data", "cuda_errors.tsv").read_text()
    table = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            code, name, string = line.split("\t", 2)
            table[int(code)] = (name, string)
    return table


SPEC_ERRORS = dict(ERRORS)
ERRORS = {**_load_full_table(), **SPEC_ERRORS}

SUCCESS = 0
INVALID_VALUE = 1
MEMORY_ALLOCATION = 2
INITIALIZATION_ERROR = 3
CUDART_UNLOADING = 4
STUB_LIBRARY = 34
INSUFFICIENT_DRIVER = 35
CALL_REQUIRES_NEWER_DRIVER = 36
NO_DEVICE = 100
INVALID_DEVICE = 101
INVALID_RESOURCE_HANDLE = 400
ILLEGAL_ADDRESS = 700
HOST_MEMORY_ALREADY_REGISTERED = 712
HOST_MEMORY_NOT_REGISTERED = 713
NOT_PERMITTED = 800
NOT_SUPPORTED = 801
UNKNOWN = 999

# Any call that initialises the runtime may return these (docs/cuda-runtime.md §2.1, \note_init_rt).
INIT_ERRORS: frozenset[int] = frozenset({INITIALIZATION_ERROR, INSUFFICIENT_DRIVER, NO_DEVICE})

# Documented return sets per API (docs/cuda-runtime.md §2.1, §3, §4, §5.3), plus the init errors.
_API_DOC: dict[str, Iterable[int]] = {
    "cudaHostRegister": (
        INVALID_VALUE, MEMORY_ALLOCATION, HOST_MEMORY_ALREADY_REGISTERED, NOT_SUPPORTED,
        NOT_PERMITTED, CUDART_UNLOADING,
    ),
    "cudaHostUnregister": (INVALID_VALUE, HOST_MEMORY_NOT_REGISTERED, CUDART_UNLOADING),
    "cudaHostAlloc": (INVALID_VALUE, MEMORY_ALLOCATION),
    "cudaMallocHost": (INVALID_VALUE, MEMORY_ALLOCATION),
    "cudaFreeHost": (INVALID_VALUE, CUDART_UNLOADING),
    "cudaMalloc": (INVALID_VALUE, MEMORY_ALLOCATION),
    "cudaFree": (INVALID_VALUE, CUDART_UNLOADING),
    # cuda_runtime_api.h / cuda-bindings 13.5 docstring: cudaSuccess, cudaErrorInvalidDevice,
    # cudaErrorInvalidValue (17, cudaErrorInvalidDevicePointer, is not among them)
    "cudaPointerGetAttributes": (INVALID_VALUE, INVALID_DEVICE),
    "cudaHostGetDevicePointer": (INVALID_VALUE, MEMORY_ALLOCATION),
    "cudaHostGetFlags": (INVALID_VALUE,),
    "cudaMemcpyAsync": (INVALID_VALUE, 21, ILLEGAL_ADDRESS),
    "cudaMemcpyBatchAsync": (INVALID_VALUE, CALL_REQUIRES_NEWER_DRIVER, NOT_SUPPORTED,
                             ILLEGAL_ADDRESS),
    "cudaStreamCreate": (INVALID_VALUE,),
    "cudaStreamDestroy": (INVALID_VALUE, INVALID_RESOURCE_HANDLE),
    "cudaStreamSynchronize": (INVALID_RESOURCE_HANDLE, ILLEGAL_ADDRESS),
    "cudaDeviceSynchronize": (ILLEGAL_ADDRESS,),
    "cudaGetDeviceCount": (),
    "cudaSetDevice": (INVALID_DEVICE,),
    "cudaGetDevice": (),
    "cudaDeviceGetAttribute": (INVALID_VALUE, INVALID_DEVICE),
    "cudaMemGetInfo": (),
}

API_ERRORS: dict[str, frozenset[int]] = {
    api: frozenset(codes) | INIT_ERRORS for api, codes in _API_DOC.items()
}


class CudaErrorInfo:
    """Name and string for a code, with the runtime's fallback for unknown codes."""

    __slots__ = ("code", "name", "string")

    def __init__(self, code: int) -> None:
        self.code = code
        self.name, self.string = ERRORS.get(code, (UNRECOGNIZED, UNRECOGNIZED))


def error_name(code: int) -> str:
    """``cudaGetErrorName``: the enum name, or "unrecognized error code".

    See docs/cuda-runtime.md §1.
    """
    return ERRORS.get(int(code), (UNRECOGNIZED, UNRECOGNIZED))[0]


def error_string(code: int) -> str:
    """``cudaGetErrorString``: libcudart 13.0's text, or "unrecognized error code" (docs/cuda-
    runtime.md §1)."""
    return ERRORS.get(int(code), (UNRECOGNIZED, UNRECOGNIZED))[1]


def code_for(name_or_code: int | str) -> int:
    """Resolve ``712``, ``"cudaErrorHostMemoryAlreadyRegistered"`` or its short name."""
    if isinstance(name_or_code, bool):
        raise TypeError("an error code must be an int or an error name, not bool")
    if isinstance(name_or_code, int):
        return int(name_or_code)
    if isinstance(name_or_code, str):
        wanted = name_or_code if name_or_code.startswith("cuda") else "cudaError" + name_or_code
        for code, (name, _) in ERRORS.items():
            if name == wanted:
                return code
        raise ValueError(f"unknown CUDA error name {name_or_code!r}")
    # enum objects of either face
    value = getattr(name_or_code, "value", None)
    if isinstance(value, int):
        return value
    raise TypeError(f"cannot read a CUDA error code from {type(name_or_code).__name__}")


def valid_errors(api: str) -> frozenset[int]:
    """Codes ``api`` can really return; KeyError names the APIs that have a table."""
    try:
        return API_ERRORS[api]
    except KeyError:
        known = ", ".join(sorted(API_ERRORS))
        raise KeyError(f"no error table for {api!r}; APIs with one: {known}") from None
