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


def test_chunks_teardown_never_tried_after_unloading_warn() -> None:
    # teardown released the last chunk, got 4 on the one before, raised, and never tried
    # the first: no leak, one warning per chunk, each naming the call that said unloading
    trace = [reg(1, BASE, 64), reg(2, BASE + 64, 64), reg(3, BASE + 128, 128),
             unreg(60, BASE + 128), unreg(61, BASE + 64, 4, injected=True)]
    r = record(trace, teardown_start=60, exercised=("register", "teardown"),
               live_end=[(BASE, 64), (BASE + 64, 64)],
               teardown_errors=[(0, 0, TypeError("cudaGetErrorString(): incompatible"))])
    assert [v.rule for v in check_run(r)] == ["teardown-raised"]
    ws = check_warnings(r)
    assert [(w.rule, w.seq) for w in ws] == [("unregister-unloading", 61)] * 2
    assert ws[0].message == (
        "chunk [kv_buffer+0x0, +64) is still registered: teardown left it after "
        "cudaHostUnregister (call #62) returned 4 cudaErrorCudartUnloading; harmless, the "
        "runtime is unloading and releases pinned memory as it goes")
    assert "its last cudaHostUnregister (call #62)" in ws[1].message


def test_without_an_unloading_error_chunks_never_tried_leak() -> None:
    trace = [reg(1, BASE, 64), reg(2, BASE + 64, 64), reg(3, BASE + 128, 128),
             unreg(60, BASE + 128), unreg(61, BASE + 64, 1, injected=True)]
    r = record(trace, teardown_start=60, exercised=("register", "teardown"),
               live_end=[(BASE, 64), (BASE + 64, 64)])
    assert [v.rule for v in check_run(r)] == ["leak", "leak"]
    assert check_warnings(r) == []


def test_unloading_in_teardown_excuses_nothing_register_left_behind() -> None:
    # register raised without rolling back its first chunk; teardown later met unloading:
    # the chunk was pinned all along, not-rolled-back as before
    trace = [reg(1, BASE, 128), reg(2, BASE + 128, 128, code=2),
             unreg(60, BASE, 4, injected=True)]
    r = record(trace, expect="register-error", error=RuntimeError("out of memory (2)"),
               seq_end=3, teardown_start=60, exercised=("register", "teardown"),
               live_end=[(BASE, 128)])
    assert "not-rolled-back" not in [v.rule for v in check_run(r)]   # its own 4: excused
    r.trace = [reg(1, BASE, 64), reg(2, BASE + 64, 64), reg(3, BASE + 128, 128, code=2),
               unreg(60, BASE, 4, injected=True)]
    r.plain, r.live_end = False, [(BASE, 64), (BASE + 64, 64)]
    assert [v.rule for v in check_run(r)].count("not-rolled-back") == 1     # never tried
    assert [w.rule for w in check_warnings(r)] == ["unregister-unloading"]


def test_one_reader_of_recorded_pointers() -> None:
    """plain_trace reads every non-int pointer as cuda-python's conversion does
    (``pointer_arg``, docs/cuda-runtime.md §9), a buffer included; a plain int stays as it
    was recorded, even one no binding would accept (an injected fault records the call
    before any conversion), so kvreg never crashes on it."""
    from kvreg.fakes.cuda.cuda_python_face import pointer_arg

    data = bytearray(16)
    values: list[Any] = [None, ctypes.c_void_p(BASE), ctypes.c_void_p(), DevicePtr(BASE + 64),
                         data, 2.0 * BASE]
    trace = [_unreg_as(i, v, 1) for i, v in enumerate(values)]
    assert [e.args[0] for e in plain_trace(trace)] == [pointer_arg(v) for v in values]
    odd = [TraceEntry(9, "cuda", "cudaHostUnregister", (-1,), 1, 1, True, 0),
           TraceEntry(10, "cuda", "cudaHostUnregister", (1 << 64,), 1, 1, True, 0)]
    assert [e.args[0] for e in plain_trace(odd)] == [-1, 1 << 64]


def test_a_register_size_is_read_as_a_size_not_an_address() -> None:
    """An injected fault records ``cudaHostRegister(ptr, size, flags)`` with the arguments as
    the caller passed them; a size given as ``np.int64`` or ``c_size_t`` (cuda-python and
    ctypes code does both) is the number it holds — ``pointer_arg`` would read a buffer-like
    ``np.int64`` as its address (docs/cuda-runtime.md §9)."""
    import numpy as np

    sizes: list[Any] = [np.int64(128), ctypes.c_size_t(256), np.uint64(1 << 30), 4096]
    trace = [TraceEntry(i, "cuda", "cudaHostRegister", (BASE, s, 0), 2, 2, True, 0)
             for i, s in enumerate(sizes, 1)]
    assert [e.args[1] for e in plain_trace(trace)] == [128, 256, 1 << 30, 4096]
    driver = [TraceEntry(9, "cuda", "cuMemHostRegister", (ctypes.c_void_p(BASE), np.int64(64), 0),
                         2, 2, True, 0)]
    assert plain_trace(driver)[0].args[:2] == (BASE, 64)
