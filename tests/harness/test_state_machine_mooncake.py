"""The RegistrationMachine's ``mooncake`` style: kvreg's Mooncake reference and a correct
variant pass; SGLang's one-call register (docs/mooncake-verbs.md §3.2: one MR for the whole
buffer, whatever the MR limit it was given) and a register without rollback fail with the
rule ``kvreg run`` names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from kvreg.harness.run.implementation import load_callable
from kvreg.harness.state_machine import RegistrationMachine

IMPLS = Path(__file__).resolve().parents[1] / "mooncake_target" / "impls"
FAST = settings(max_examples=15, stateful_step_count=8, deadline=None)


class MooncakeReferenceMachine(RegistrationMachine):
    style = "mooncake"


class ForwardRollbackMachine(RegistrationMachine):
    style = "mooncake"
    register_impl = staticmethod(load_callable(f"{IMPLS / 'forward_rollback.py'}:register"))
    teardown_impl = staticmethod(load_callable(f"{IMPLS / 'forward_rollback.py'}:teardown"))


TestMooncakeReference = MooncakeReferenceMachine.TestCase
TestMooncakeReference.settings = FAST
TestForwardRollback = ForwardRollbackMachine.TestCase
TestForwardRollback.settings = FAST


def no_rollback(store: Any, ptr: int, nbytes: int, *, max_mr_size: int,
                granularity: int | None) -> list[tuple[int, int]]:
    step = max_mr_size // granularity * granularity if granularity else max_mr_size
    out = []
    for off in range(0, nbytes, step):
        size = min(step, nbytes - off)
        if store.register_buffer(ptr + off, size):
            raise RuntimeError("register_buffer failed")   # forgets the MRs before it
        out.append((ptr + off, size))
    return out


def teardown(store: Any, ranges: list[tuple[int, int]]) -> None:
    while ranges:
        store.unregister_buffer(ranges.pop()[0])


def test_one_call_register_goes_above_the_mr_limit() -> None:
    class OneCall(RegistrationMachine):
        style = "mooncake"
        register_impl = staticmethod(load_callable(f"{IMPLS / 'sglang_one_call.py'}:register"))
        teardown_impl = staticmethod(load_callable(f"{IMPLS / 'sglang_one_call.py'}:teardown"))

    # the machine's pools (< 9 GB) stay below the store's own 1 TiB limit, so the store
    # takes the MR; the limit register was given (1-3 GiB) is what it breaks
    with pytest.raises(AssertionError, match=r"^\[mr-over-limit\] an MR of \d+ bytes is above "
                                             r"the MR limit \d+"):
        run_state_machine_as_test(OneCall, settings=settings(max_examples=40, deadline=None,
                                                             stateful_step_count=6))


def test_missing_rollback_is_caught() -> None:
    class Broken(RegistrationMachine):
        style = "mooncake"
        register_impl = staticmethod(no_rollback)
        teardown_impl = staticmethod(teardown)

    with pytest.raises(AssertionError, match=r"^\[not-rolled-back\] failed register left "
                                             r"\d+ chunk\(s\) registered"):
        run_state_machine_as_test(Broken, settings=settings(max_examples=50, deadline=None,
                                                            stateful_step_count=8))
