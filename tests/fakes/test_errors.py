"""The error table (docs/cuda-runtime.md §1) and cudaGetErrorString / cudaGetErrorName."""

from __future__ import annotations

import pytest

from kvreg.fakes.cuda import errors as E
from kvreg.fakes.cuda.fake_cuda import FakeCuda

# docs/cuda-runtime.md §1 table, transcribed independently of errors.py [DOC] + [OBS-local]
SPEC_TABLE = {
    0: ("cudaSuccess", "no error"),
    1: ("cudaErrorInvalidValue", "invalid argument"),
    2: ("cudaErrorMemoryAllocation", "out of memory"),
    3: ("cudaErrorInitializationError", "initialization error"),
    4: ("cudaErrorCudartUnloading", "driver shutting down"),
    34: ("cudaErrorStubLibrary", "CUDA driver is a stub library"),
    35: ("cudaErrorInsufficientDriver",
         "CUDA driver version is insufficient for CUDA runtime version"),
    36: ("cudaErrorCallRequiresNewerDriver",
         "API call is not supported in the installed CUDA driver"),
    100: ("cudaErrorNoDevice", "no CUDA-capable device is detected"),
    600: ("cudaErrorNotReady", "device not ready"),
    700: ("cudaErrorIllegalAddress", "an illegal memory access was encountered"),
    712: ("cudaErrorHostMemoryAlreadyRegistered",
          "part or all of the requested memory range is already mapped"),
    713: ("cudaErrorHostMemoryNotRegistered",
          "pointer does not correspond to a registered memory region"),
    800: ("cudaErrorNotPermitted", "operation not permitted"),
    801: ("cudaErrorNotSupported", "operation not supported"),
    999: ("cudaErrorUnknown", "unknown error"),
}


@pytest.mark.parametrize("code", sorted(SPEC_TABLE))
def test_error_table_matches_spec_rows(code: int) -> None:
    # docs/cuda-runtime.md §1 "Error names and numeric values" [DOC] + [OBS-local]
    assert E.ERRORS[code] == SPEC_TABLE[code]
    assert E.error_name(code) == SPEC_TABLE[code][0]
    assert E.error_string(code) == SPEC_TABLE[code][1]


def test_torch_stale_not_ready_value_is_stub_library() -> None:
    # docs/cuda-runtime.md §1 "Trap: torch ... ERROR_NOT_READY = 34" [OBS-local]
    assert E.error_name(34) == "cudaErrorStubLibrary"
    assert E.error_name(600) == "cudaErrorNotReady"


@pytest.mark.parametrize("code", [1713, 9999, 12345, -1, 2**31])
def test_unknown_codes_are_unrecognized(code: int) -> None:
    # docs/cuda-runtime.md §1 last row "other: name and string both 'unrecognized error code'"
    # [OBS-local]
    assert E.error_name(code) == "unrecognized error code"
    assert E.error_string(code) == "unrecognized error code"
    info = E.CudaErrorInfo(code)
    assert (info.name, info.string) == ("unrecognized error code",) * 2


def test_cuda_python_face_error_string_and_name() -> None:
    # docs/cuda-runtime.md §9 "cudaGetErrorString(e) and cudaGetErrorName(e) return
    # (cudaSuccess, bytes) and accept a cudaError_t or a plain int" [OBS-local]
    fake = FakeCuda()
    rt = fake.runtime
    err, text = rt.cudaGetErrorString(712)
    assert int(err) == 0 and not err
    assert text == b"part or all of the requested memory range is already mapped"
    err, name = rt.cudaGetErrorName(rt.cudaError_t(713))
    assert int(err) == 0
    assert name == b"cudaErrorHostMemoryNotRegistered"
    assert rt.cudaGetErrorString(12345)[1] == b"unrecognized error code"
    assert rt.cudaGetErrorName(12345)[1] == b"unrecognized error code"


def test_error_strings_do_not_touch_last_error() -> None:
    # docs/cuda-runtime.md §6: only failing runtime calls set the last-error slot [DOC];
    # cudaGetErrorString returns cudaSuccess
    fake = FakeCuda()
    rt = fake.runtime
    rt.cudaHostUnregister(0x1234)          # 713
    rt.cudaGetErrorString(9999)
    rt.cudaGetErrorName(9999)
    assert int(rt.cudaPeekAtLastError()[0]) == 713


def test_torch_face_error_string() -> None:
    # docs/cuda-runtime.md §7 "cudaGetErrorString(err): argument must be a cudaError enum
    # object; a plain int raises TypeError" [OBS-local]
    fake = FakeCuda()
    t = fake.torch
    assert t.cudaGetErrorString(t.cudaError(712)) == \
        "part or all of the requested memory range is already mapped"
    assert t.cudaGetErrorString(t.cudaError(4242)) == "unrecognized error code"
    assert t.cudaGetErrorString(t.cudaError.success) == "no error"
    with pytest.raises(TypeError):
        t.cudaGetErrorString(712)


def test_code_for_resolves_names_and_rejects_unknown() -> None:
    # docs/cuda-runtime.md §1: names and numbers are one table
    assert E.code_for("cudaErrorHostMemoryAlreadyRegistered") == 712
    assert E.code_for("HostMemoryNotRegistered") == 713
    assert E.code_for(2) == 2
    with pytest.raises(ValueError):
        E.code_for("cudaErrorNoSuchThing")
    with pytest.raises(TypeError):
        E.code_for(True)


@pytest.mark.parametrize(("api", "code", "allowed"), [
    # docs/cuda-runtime.md §2.1 documented return set of cudaHostRegister [DOC]
    ("cudaHostRegister", 712, True), ("cudaHostRegister", 2, True),
    ("cudaHostRegister", 801, True), ("cudaHostRegister", 713, False),
    # docs/cuda-runtime.md §3: Success, InvalidValue and HostMemoryNotRegistered (+ 4 during
    # teardown)
    ("cudaHostUnregister", 713, True), ("cudaHostUnregister", 2, False),
    # docs/cuda-runtime.md §2.1 \note_init_rt: every API may return the init errors
    ("cudaHostUnregister", 35, True), ("cudaHostGetFlags", 100, True),
])
def test_api_error_sets(api: str, code: int, allowed: bool) -> None:
    assert (code in E.valid_errors(api)) is allowed


def test_valid_errors_unknown_api_names_known_ones() -> None:
    with pytest.raises(KeyError, match="cudaHostRegister"):
        E.valid_errors("cudaNoSuchApi")


# -- conformance against the real binding ------------------------------------------------

@pytest.mark.parametrize("code", sorted(E.ERRORS))
def test_error_table_conforms_to_cuda_bindings(code: int) -> None:
    # docs/cuda-runtime.md §1: "Three sources agree on these values ... the cudaError_t enum
    # in cuda-bindings 12.9.10 and 13.4.4" [DOC] + [OBS-local]; cudaGetErrorString works
    # without a driver [OBS-local]
    runtime = pytest.importorskip(
        "cuda.bindings.runtime", reason="cuda-bindings is not installed: no table to compare")
    name, string = E.ERRORS[code]
    member = runtime.cudaError_t(code)
    assert member.name == name
    assert int(member) == code
    err, text = runtime.cudaGetErrorString(code)
    assert int(err) == 0
    assert text.decode() == string
    err, real_name = runtime.cudaGetErrorName(member)
    assert int(err) == 0
    assert real_name.decode() == name


def test_unrecognized_code_conforms_to_cuda_bindings() -> None:
    # docs/cuda-runtime.md §1 last row [OBS-local]
    runtime = pytest.importorskip(
        "cuda.bindings.runtime", reason="cuda-bindings is not installed: no table to compare")
    fake = FakeCuda()
    for code in (1713, 9999, 2**31):
        assert runtime.cudaGetErrorString(code)[1] == fake.runtime.cudaGetErrorString(code)[1]
        assert runtime.cudaGetErrorName(code)[1] == fake.runtime.cudaGetErrorName(code)[1]
    with pytest.raises(ValueError):
        runtime.cudaError_t(9999)
