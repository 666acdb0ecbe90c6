"""The calls the real agent answers by dying (SIGSEGV), each in a child process, and the
fake's :class:`~kvreg.fakes.nixl.NixlCrash` for the same call (docs/nixl.md §5)."""

from __future__ import annotations

import signal

import numpy as np
import pytest

from kvreg.fakes.nixl import FakeNixl, NixlCrash
from kvreg.realhw.nixl_real import run_case

pytestmark = pytest.mark.kvreg_nixl_real

SEGV = -signal.SIGSEGV


def test_posting_a_released_handle_crashes_both() -> None:
    assert run_case("post-released-handle") == SEGV
    fake = FakeNixl("ucx-host")
    a, b = fake.agent("ca"), fake.agent("cb")
    buf = np.zeros(8192, np.uint8)
    ptr = int(buf.ctypes.data)
    a.register_memory([(ptr, 4096, 0, "")], "DRAM")
    b.register_memory([(ptr + 4096, 4096, 0, "")], "DRAM")
    a.add_remote_agent(b.get_agent_metadata())
    h = a.initialize_xfer("WRITE", a.get_xfer_descs([(ptr, 8, 0)], "DRAM"),
                          b.get_xfer_descs([(ptr + 4096, 8, 0)], "DRAM"), "cb")
    h.release()
    with pytest.raises(NixlCrash):
        a.transfer(h)


def test_one_descriptor_twice_in_a_deregistration_crashes_both() -> None:
    assert run_case("dereg-same-descriptor-twice") == SEGV
    a = FakeNixl("ucx-host").agent("ca")
    buf = np.zeros(64, np.uint8)
    ptr = int(buf.ctypes.data)
    a.register_memory([(ptr, 64, 0, "")], "DRAM")
    with pytest.raises(NixlCrash):
        a.deregister_memory(a.get_reg_descs([(ptr, 64, 0, ""), (ptr, 64, 0, "")], "DRAM"))


def test_a_process_that_made_an_agent_dies_at_exit() -> None:
    # why realhw/nixl_real.py keeps every real agent in a child that leaves by os._exit:
    # the fake has no counterpart (a process's exit is not a call of the API)
    assert run_case("exit-after-agent") == SEGV
