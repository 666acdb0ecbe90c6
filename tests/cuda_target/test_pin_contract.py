"""The contract read from an implementation (harness/run/contract.py) at the edges the
scenario tests do not reach; each test is a behaviour a mutant of the module changed
(docs/mutation-testing.md).

A store is closed only by ``--teardown close`` (a closed store's ``close()`` returns 0,
docs/mooncake-verbs.md §7.1); a caller that does not say so gets a teardown judged by what it
declares (the state machine asks ``contract_of(style, register, teardown)`` that way). Only
SGLang's chunk limit binds just where a granularity is passed (its register makes one call
when none is, harness/cuda/checks.py ``limit_needs_granularity``); a chunk limit the code
declares itself binds every call.
"""

from __future__ import annotations

from typing import Any

from kvreg.harness.run.contract import BY_CLOSE, UNDECLARED, contract_of


def _teardown() -> Any:
    def teardown(ranges: Any) -> None: ...
    return teardown


def test_a_store_is_not_taken_for_closed_unless_the_caller_says_so() -> None:
    plain = contract_of("mooncake", None, _teardown())
    assert (plain.repeatable, plain.repeatable_by) == (False, UNDECLARED)
    closed = contract_of("mooncake", None, _teardown(), close=True)
    assert (closed.repeatable, closed.repeatable_by) == (True, BY_CLOSE)


def test_only_the_sglang_limit_waits_for_a_granularity() -> None:
    def register(cudart: Any, ptr: int, nbytes: int, *, granularity: Any,
                 chunk_limit: int) -> None: ...
    for style in ("generic", "ctypes", "driver"):
        assert contract_of(style, register).limit_with_granularity_only is False, style
    assert contract_of("sglang", None).limit_with_granularity_only is True
