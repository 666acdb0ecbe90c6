"""A once-only teardown's chunks left pinned (harness/cuda/teardown_once.py) on hand-built records.

Which failed unregisters leave a registration pinned is docs/cuda-runtime.md §3.1: 1 and 713
leave it (the call did nothing), 4 (cudaErrorCudartUnloading) does not (the runtime releases
pinned memory as it unloads; checks.py warns about it apart). A chunk the only teardown could
not release stays pinned until the process exits whatever the code does: a warning naming
the call, not a leak. Each test is a behaviour a mutant of the module changed
(docs/mutation-testing.md).
"""

from __future__ import annotations

import ctypes

from kvreg.fakes.recorder import TraceEntry
from kvreg.harness.cuda.teardown_once import RULE, not_retried, not_retried_warnings

from .test_pin_checks_cuda import BASE, SPEC, TEARDOWN, record, reg, unreg


def _unreg_as(seq: int, ptr: object, code: int = 0, injected: bool = False) -> TraceEntry:
    return TraceEntry(seq, "ctypes", "cudaHostUnregister", (ptr,), code, code, injected, 0)


def _seqs(found: dict[int, TraceEntry]) -> dict[int, int]:
    return {ptr - BASE: e.seq for ptr, e in found.items()}


def test_the_last_teardown_unregister_of_a_live_chunk_failed_by_a_fault() -> None:
    # the fault hits the very call teardown starts with (its seq is teardown_start)
    trace = [reg(1, BASE, 128), reg(2, BASE + 128, 128),
             unreg(60, BASE, code=1, injected=True), unreg(61, BASE + 128)]
    r = record(trace, teardown_start=60, exercised=TEARDOWN, live_end=[(BASE, 128)])
    assert _seqs(not_retried(r)) == {0: 60}


def test_no_teardown_means_nothing_to_keep() -> None:
    trace = [reg(1, BASE, 128), unreg(2, BASE, code=1, injected=True)]
    assert not_retried(record(trace, live_end=[(BASE, 128)])) == {}


def test_only_teardown_calls_count() -> None:
    # the rollback's failed unregister (before teardown) is the register's to answer for
    trace = [reg(1, BASE, 128), unreg(2, BASE, code=1, injected=True)]
    r = record(trace, teardown_start=60, exercised=TEARDOWN, live_end=[(BASE, 128)])
    assert not_retried(r) == {}


def test_a_retry_in_the_same_teardown_decides() -> None:
    # failed, then retried: the last call is what the chunk's state rests on
    ok = [reg(1, BASE, 128), unreg(60, BASE, code=1, injected=True), unreg(61, BASE)]
    assert not_retried(record(ok, teardown_start=60, exercised=TEARDOWN, live_end=[])) == {}
    again = [reg(1, BASE, 128), unreg(60, BASE), unreg(61, BASE, code=713, injected=True)]
    r = record(again, teardown_start=60, exercised=TEARDOWN, live_end=[(BASE, 128)])
    assert _seqs(not_retried(r)) == {0: 61}


def test_only_injected_faults_that_leave_it_pinned() -> None:
    for code, injected, kept in ((1, True, True), (713, True, True), (4, True, False),
                                 (1, False, False), (0, True, False)):
        trace = [reg(1, BASE, 128), unreg(60, BASE, code=code, injected=injected)]
        r = record(trace, teardown_start=60, exercised=TEARDOWN, live_end=[(BASE, 128)])
        assert (BASE in not_retried(r)) is kept, (code, injected)


def test_a_chunk_no_longer_live_is_not_kept() -> None:
    trace = [reg(1, BASE, 128), reg(2, BASE + 128, 128), unreg(60, BASE, code=1, injected=True),
             unreg(61, BASE + 128, code=1, injected=True)]
    r = record(trace, teardown_start=60, exercised=TEARDOWN, live_end=[(BASE + 128, 128)])
    assert _seqs(not_retried(r)) == {128: 61}


def test_pointers_are_read_as_the_binding_reads_them() -> None:
    # ctypes' c_void_p is the chunk's base; a str never reached the runtime (the binding
    # refuses it with TypeError) and is skipped, not a crash of kvreg's
    trace = [reg(1, BASE, 128), _unreg_as(60, "kv", code=1, injected=True),
             _unreg_as(61, ctypes.c_void_p(BASE), code=1, injected=True)]
    r = record(trace, teardown_start=60, exercised=TEARDOWN, live_end=[(BASE, 128)])
    assert _seqs(not_retried(r)) == {0: 61}


def test_the_warning_names_the_chunk_and_the_call() -> None:
    trace = [reg(1, BASE, 128), reg(2, BASE + 128, 128),
             unreg(60, BASE + 128, code=713, injected=True), unreg(61, BASE, code=1, injected=True)]
    r = record(trace, teardown_start=60, exercised=TEARDOWN)
    kept = {BASE + 128: (128, trace[2]), BASE: (128, trace[3])}
    ws = not_retried_warnings(r, kept)
    assert [(w.rule, w.seq) for w in ws] == [(RULE, 61), (RULE, 60)]     # by address
    assert RULE == "unregister-not-retried"
    assert ws[0].message == (
        "chunk [kv_buffer+0x0, +128) stays registered: its cudaHostUnregister in the only "
        "teardown (call #62) returned 1 cudaErrorInvalidValue, and no later teardown retries "
        "it (the implementation declares no repeatable teardown); it stays pinned until the "
        "process exits")
    assert ws[1].message.startswith(
        "chunk [kv_buffer+0x80, +128) stays registered: its cudaHostUnregister in the only "
        "teardown (call #61) returned 713 cudaErrorHostMemoryNotRegistered")


def test_a_base_outside_every_buffer_is_named_by_its_address() -> None:
    # the buffer is [BASE, BASE + 256): its end is the next address, not its own
    r = record([], teardown_start=60, exercised=TEARDOWN)
    e = unreg(60, BASE + 256, code=1, injected=True)
    (w,) = not_retried_warnings(r, {BASE + 256: (64, e)})
    assert w.message.startswith(f"chunk [{BASE + 256:#x}, +64) stays registered")
    (w,) = not_retried_warnings(r, {BASE + 255: (1, e)})
    assert w.message.startswith("chunk [kv_buffer+0xff, +1) stays registered")


def test_an_empty_buffer_owns_its_base_only() -> None:
    # the zero-byte stand-in of a buffer (scenario ``empty``) still has a base a chunk may
    # name; the byte after it is not the buffer's
    r = record([], teardown_start=60, exercised=TEARDOWN)
    empty = SPEC.__class__(SPEC.name, (0,), SPEC.dtype, SPEC.granularity, SPEC.copy_unit, (),
                           SPEC.cuda_registered)
    r.buffers[0].spec = empty
    e = unreg(60, BASE, code=1, injected=True)
    (w,) = not_retried_warnings(r, {BASE: (64, e)})
    assert w.message.startswith("chunk [kv_buffer+0x0, +64) stays registered")
    (w,) = not_retried_warnings(r, {BASE + 1: (64, e)})
    assert w.message.startswith(f"chunk [{BASE + 1:#x}, +64) stays registered")
