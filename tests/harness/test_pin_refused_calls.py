"""Judge results, as the real machine does (issue 24 §4), on hand-built run records.

A ``cudaHostRegister`` the runtime refused registered nothing (docs/cuda-runtime.md §2: the
call returns an error and pins no page), so it keeps no promise and breaks none: only calls
that registered are held to a declared chunk limit. And the failure a register ended on is
the one to name: code that tried the whole buffer, was refused (2 at the 512 GiB per-call
ceiling of R580+ drivers, §2.2) and went on in chunks recovered from that refusal; a chunk
that then failed is what error-swallowed, the unexpected-error sentence and error-reported
speak of.
"""

from __future__ import annotations

import random

import pytest

from kvreg.harness.cuda.checks import RunRecord, check_run
from kvreg.harness.run.endstate import (
    BufferEnd,
    FailedCall,
    check_error_reported,
    decisive_failure,
    mark_superseded,
    summarize_exception,
)

from .test_check_run_unit import BASE, N, record, reg

LIMIT = 128     # the record's declared chunk limit; the buffer is 256 bytes


def _over(v_rules: list[str]) -> bool:
    return "chunk-over-limit" in v_rules


# -- chunk-over-limit: a refused call is judged by what came of it -----------------------------

def test_a_refused_call_over_the_limit_is_no_chunk_over_limit() -> None:
    whole_refused = [reg(1, BASE, N, code=2), reg(2, BASE, LIMIT), reg(3, BASE + LIMIT, LIMIT)]
    vs = check_run(record(whole_refused))
    assert not _over([v.rule for v in vs]), vs


@pytest.mark.parametrize("code", [1, 2, 217])
def test_any_refusal_registers_nothing(code: int) -> None:
    refused = [reg(1, BASE, N, code=code, injected=code == 1), reg(2, BASE, LIMIT),
               reg(3, BASE + LIMIT, LIMIT)]
    assert not _over([v.rule for v in check_run(record(refused))])


def test_a_registered_call_over_the_limit_still_breaks_the_declared_contract() -> None:
    # the broken twin: the same whole call, accepted by the runtime
    (v,) = [v for v in check_run(record([reg(1, BASE, N)])) if v.rule == "chunk-over-limit"]
    assert v.message == ("call #2 registers 256 bytes at kv_buffer+0x0, above the chunk "
                         "limit 128")
    # one registered over-limit chunk among refused ones is still caught, at its own call
    mixed = [reg(1, BASE, N, code=2), reg(2, BASE, N)]
    (v,) = [v for v in check_run(record(mixed)) if v.rule == "chunk-over-limit"]
    assert v.seq == 2


# -- the failure a register ended on ---------------------------------------------------------

WHOLE_THEN_CHUNK_FAILS = [reg(1, BASE, N, code=2), reg(2, BASE, LIMIT),
                          reg(3, BASE + LIMIT, LIMIT, code=1)]


def test_error_swallowed_names_the_chunk_not_the_refused_whole_call() -> None:
    r = record(WHOLE_THEN_CHUNK_FAILS, live_end=[(BASE, LIMIT)])
    (v,) = [v for v in check_run(r) if v.rule == "error-swallowed"]
    assert v.seq == 3
    assert v.message.startswith("cudaHostRegister returned 1 (invalid argument) at "
                                "kv_buffer+0x80 (call #4) but register() of kv_buffer returned "
                                "normally: the pool would run partly unpinned")


def _ceiling(r: RunRecord) -> RunRecord:
    r.per_call_limit = N       # the whole buffer is at the per-call ceiling
    return r


def test_unexpected_error_names_the_chunk_not_the_refused_whole_call() -> None:
    r = _ceiling(record(WHOLE_THEN_CHUNK_FAILS,
                        error=RuntimeError("chunk failed: invalid argument")))
    (v,) = [v for v in check_run(r) if v.rule == "unexpected-error"]
    assert v.message == ("register() of kv_buffer raised RuntimeError: chunk failed: invalid "
                         "argument; cudaHostRegister(kv_buffer+0x80, 128) returned 1 (invalid "
                         "argument)")
    # one refused call alone is still what it ended on, with the ceiling's advice
    alone = _ceiling(record([reg(1, BASE, N, code=2)], error=RuntimeError("out of memory")))
    (v,) = [v for v in check_run(alone) if v.rule == "unexpected-error"]
    assert "cudaHostRegister(kv_buffer+0x0, 256) returned 2 (out of memory): a single call" \
        in v.message


def _end(failed: list[FailedCall], exc: BaseException) -> BufferEnd:
    return BufferEnd("kv_buffer", BASE, N, 64, False, summarize_exception(exc), 50, [], failed)


def _failed(seq: int, ptr: int, size: int, code: int, name: str, text: str) -> FailedCall:
    return FailedCall(seq, "cudaHostRegister", ptr, size, code, name, text)


WHOLE = _failed(1, BASE, N, 2, "cudaErrorMemoryAllocation", "out of memory")
CHUNK = _failed(3, BASE + LIMIT, LIMIT, 1, "cudaErrorInvalidValue", "invalid argument")
RETRY = _failed(4, BASE + LIMIT, LIMIT, 2, "cudaErrorMemoryAllocation", "out of memory")
ATTEMPTS = [(1, BASE, N), (2, BASE, LIMIT), (3, BASE + LIMIT, LIMIT)]


def test_error_reported_asks_for_the_chunks_error_after_a_refused_whole_call() -> None:
    failed = mark_superseded([WHOLE, CHUNK], ATTEMPTS)
    assert [f.superseded for f in failed] == [True, False]
    assert check_error_reported([_end(failed, RuntimeError("cudaErrorInvalidValue"))]) == []
    (v,) = check_error_reported([_end(failed, RuntimeError("cudaErrorMemoryAllocation"))])
    assert "which does not name cudaErrorInvalidValue (1, invalid argument) returned by " \
        "cudaHostRegister(kv_buffer+0x80, 128) (call #4)" in v.message


def test_error_reported_accepts_either_try_of_one_retried_call() -> None:
    # the chunk failed with 1, its retry with 2: reporting the chunk's first error is fine
    failed = mark_superseded([WHOLE, CHUNK, RETRY], [*ATTEMPTS, (4, BASE + LIMIT, LIMIT)])
    assert decisive_failure(failed) == RETRY
    for text in ("cudaErrorInvalidValue", "cudaErrorMemoryAllocation"):
        assert check_error_reported([_end(failed, RuntimeError(text))]) == [], text
    (v,) = check_error_reported([_end(failed, RuntimeError("pinning failed"))])
    assert "(call #5)" in v.message


def test_the_last_failure_is_decisive_when_every_one_was_tried_again() -> None:
    a = _failed(1, BASE, LIMIT, 2, "x", "")
    b = _failed(2, BASE, LIMIT, 1, "y", "")
    both = mark_superseded([a, b], [(1, BASE, LIMIT), (2, BASE, LIMIT), (3, BASE, 64)])
    assert all(f.superseded for f in both) and decisive_failure(both) == both[1]


def _brute(failed: list[FailedCall], attempts: list[tuple[int, int, int]]) -> list[bool]:
    """The definition, written out: a later attempt whose bytes overlap the call's."""
    return [any(seq > f.seq and ptr < f.ptr + max(f.size, 1) and f.ptr < ptr + max(size, 1)
                for seq, ptr, size in attempts) for f in failed]


def test_the_sweep_agrees_with_the_definition() -> None:
    rng = random.Random(2024)
    for _ in range(400):
        attempts = [(seq, rng.randrange(0, 64), rng.choice([0, 1, 2, 5, 9, 17]))
                    for seq in rng.sample(range(40), rng.randrange(1, 14))]
        failed = [_failed(seq, ptr, size, 2, "x", "") for seq, ptr, size in sorted(attempts)
                  if rng.random() < 0.5]
        got = [f.superseded for f in mark_superseded(failed, attempts)]
        assert got == _brute(failed, attempts), (attempts, failed)
