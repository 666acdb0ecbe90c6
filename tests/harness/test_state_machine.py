"""The exported RegistrationMachine: it passes kvreg's reference and catches broken code."""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from kvreg.harness.state_machine import RegistrationMachine


class ReferenceMachine(RegistrationMachine):
    pass


TestReference = ReferenceMachine.TestCase
TestReference.settings = settings(max_examples=25, stateful_step_count=12, deadline=None)


def byte_offset_register(buffer: Any, granularity: int | None) -> None:
    """SGLang style, but cuts at the limit: the PR #36798 bug."""
    cudart = torch.cuda.cudart()
    limit = int(os.environ["SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB"]) << 30
    ranges = []
    for off in range(0, buffer.nbytes, limit):
        size = min(limit, buffer.nbytes - off)
        if int(cudart.cudaHostRegister(buffer.data_ptr() + off, size, 0)):
            for p in reversed(ranges):
                cudart.cudaHostUnregister(p)
            raise RuntimeError("cudaHostRegister failed")
        ranges.append(buffer.data_ptr() + off)
    buffer.ranges = ranges


def sglang_teardown(buffer: Any) -> None:
    cudart = torch.cuda.cudart()
    for p in reversed(getattr(buffer, "ranges", [])):
        cudart.cudaHostUnregister(p)
    buffer.ranges = []


def no_rollback_register(cudart: Any, ptr: int, nbytes: int, *, granularity: int | None,
                         chunk_limit: int) -> list[tuple[int, int]]:
    chunk = chunk_limit // granularity * granularity if granularity else chunk_limit
    out = []
    for off in range(0, nbytes, chunk):
        size = min(chunk, nbytes - off)
        if int(cudart.cudaHostRegister(ptr + off, size, 0)):
            raise RuntimeError("failed")   # forgets the chunks before it
        out.append((ptr + off, size))
    return out


def test_machine_catches_byte_offset_seams() -> None:
    class Broken(RegistrationMachine):
        style = "sglang"
        register_impl = staticmethod(byte_offset_register)
        teardown_impl = staticmethod(sglang_teardown)

    # the invariant after register sees the seam before any copy could
    with pytest.raises(AssertionError, match=r"^\[seams-aligned\] a seam at offset \d+ cuts "
                                             r"page \d+ of \d+ bytes"):
        run_state_machine_as_test(Broken, settings=settings(max_examples=40, deadline=None,
                                                            stateful_step_count=8))


def test_machine_catches_missing_rollback() -> None:
    class Broken(RegistrationMachine):
        register_impl = staticmethod(no_rollback_register)

    with pytest.raises(AssertionError, match=r"^\[not-rolled-back\] failed register left "
                                             r"\d+ chunk\(s\) registered"):
        run_state_machine_as_test(Broken, settings=settings(max_examples=50, deadline=None,
                                                            stateful_step_count=8))
