"""The CUDA checks on hand-built records whose pointers are what the bindings accept but are
not ints (docs/cuda-runtime.md §3, §9): ctypes' None for NULL, a ``c_void_p``, an object with
``__int__`` such as ``CUdeviceptr``; and the boundary between a chunk forgotten after
cudaErrorCudartUnloading (a warning) and after any other failure (a leak), §3.1."""

from __future__ import annotations

import ctypes
from typing import Any

from kvreg.fakes.recorder import TraceEntry
from kvreg.harness.cuda.checks import check_run, check_warnings, plain_trace
from kvreg.harness.run.endstate import PROGRAMMING_ERRORS

from .test_check_run_unit import BASE, record, reg, unreg


class DevicePtr:
    """Stands for cuda-python's CUdeviceptr: an int conversion, no int subclass."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __int__(self) -> int:
        return self.value


def _unreg_as(seq: int, ptr: Any, code: int = 0) -> TraceEntry:
    return TraceEntry(seq, "cuda", "cudaHostUnregister", (ptr,), code, code, False, 0)


def test_pointers_are_read_as_the_bindings_read_them() -> None:
    trace = [reg(1, BASE, 128), _unreg_as(2, ctypes.c_void_p(BASE)), _unreg_as(3, None, 1),
             _unreg_as(4, DevicePtr(BASE + 128), 713), _unreg_as(5, ctypes.c_void_p(), 1)]
    assert [e.args[0] for e in plain_trace(trace)] == [BASE, BASE, 0, BASE + 128, 0]
    assert all(type(e.args[0]) is int for e in plain_trace(trace))


def test_null_unregisters_warn_and_a_real_bad_pointer_still_fails() -> None:
    trace = [reg(1, BASE, 128), reg(2, BASE + 128, 128), _unreg_as(60, ctypes.c_void_p(BASE)),
             _unreg_as(61, DevicePtr(BASE + 128)), _unreg_as(62, None, 1),
             _unreg_as(63, DevicePtr(BASE + 64), 1)]
    r = record(trace, teardown_start=60, exercised=("register", "teardown"))
    (bad,) = check_run(r)
    assert bad.rule == "unregister-not-a-live-base"
    assert "call #64 unregisters kv_buffer+0x40" in bad.message
    (null,) = check_warnings(r)
    assert (null.rule, null.seq) == ("unregister-null", 62)
    assert null.message.startswith("call #63 unregisters NULL")


def test_an_injected_null_failure_is_no_warning() -> None:
    trace = [reg(1, BASE, 128), reg(2, BASE + 128, 128), unreg(60, BASE),
             unreg(61, BASE + 128), TraceEntry(62, "torch", "cudaHostUnregister", (None,), 1,
                                               1, True, 0)]
    r = record(trace, teardown_start=60, exercised=("register", "teardown"))
    assert check_run(r) == [] and check_warnings(r) == []


def _left_after(code: int) -> tuple[list[str], list[str]]:
    trace = [reg(1, BASE, 128), reg(2, BASE + 128, 128), unreg(60, BASE),
             unreg(61, BASE + 128, code, injected=True)]
    r = record(trace, teardown_start=60, exercised=("register", "teardown"),
               live_end=[(BASE + 128, 128)])
    return [v.rule for v in check_run(r)], [w.rule for w in check_warnings(r)]


def test_a_chunk_forgotten_at_unload_warns_any_other_failure_leaks() -> None:
    assert _left_after(4) == ([], ["unregister-unloading"])
    for code in (1, 713, 3):
        assert _left_after(code) == (["leak"], []), code


def test_a_retry_that_succeeds_after_unloading_leaves_nothing_to_say() -> None:
    trace = [reg(1, BASE, 128), reg(2, BASE + 128, 128), unreg(60, BASE),
             unreg(61, BASE + 128, 4, injected=True), unreg(62, BASE + 128)]
    r = record(trace, teardown_start=60, exercised=("register", "teardown", "teardown"))
    assert check_run(r) == [] and check_warnings(r) == []


def test_a_teardown_typeerror_is_raised_even_under_an_injected_fault() -> None:
    assert "TypeError" in PROGRAMMING_ERRORS
    trace = [reg(1, BASE, 128), reg(2, BASE + 128, 128), unreg(60, BASE),
             unreg(61, BASE + 128, 1, injected=True), unreg(62, BASE + 128)]
    for err, expected in ((TypeError("can only concatenate str"), ["teardown-raised"]),
                          (RuntimeError("cudaHostUnregister failed: 1"), [])):
        r = record(trace, teardown_start=60, exercised=("register", "teardown", "teardown"),
                   teardown_errors=[(0, 0, err)])
        assert [v.rule for v in check_run(r)] == expected, err
