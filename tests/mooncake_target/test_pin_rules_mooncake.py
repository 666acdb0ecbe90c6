"""The Mooncake target's rules at edges the rule registry's mutation samples found unpinned
(harness/mooncake/checks.py, docs/mutation-testing.md, seeds 303 and 404 on the registry's
blob), on run records built as the fake store's trace shows them.

register_buffer returns 0 or -600 INVALID_PARAMS; released Mooncake refuses one above the
effective MR limit, a store built without that check accepts it and splits it into MRs
(docs/mooncake-verbs.md §1.4-§1.6).
"""

from __future__ import annotations

from kvreg.harness.mooncake.checks import McRecord, buffer_ends, check_mooncake_run

from .test_pin_checks_mooncake import BASE, INVALID, buf, reg

OVER = "above the effective MR limit 128"


def _over_limit(r: McRecord) -> list[str]:
    return [v.message for v in check_mooncake_run(r) if v.rule == "mr-over-limit"]


def test_an_over_limit_call_on_a_store_without_the_check_is_left_to_the_transfers() -> None:
    # a store that does not check the limit accepts the MR (§1.6); a fault injected into that
    # call and register() raising it is the error path, not an over-limit fault
    err = RuntimeError("register_buffer returned -600")
    b = buf(error=err, seq_start=5, seq_end=9)
    for limited, n in ((False, 0), (True, 1)):
        r = McRecord(128, "register-error", limited, [b],
                     [reg(6, BASE, 256, code=INVALID, injected=True)])
        assert len(_over_limit(r)) == n, (limited, _over_limit(r))


def test_an_over_limit_call_at_the_buffers_seq_end_is_outside_register() -> None:
    # register() of the buffer spans calls 5..49 (seq_end 50 is the first call after it)
    for seq in (50, 51):
        r = McRecord(128, "success", True, [buf(seq_start=5, seq_end=50)],
                     [reg(seq, BASE, 256, code=INVALID)])
        vs = _over_limit(r)
        assert len(vs) == 1 and OVER in vs[0], (seq, vs)
        assert vs[0].endswith("; it was made outside register()"), (seq, vs)


def test_a_pool_expected_rejected_that_raised_another_error_is_judged() -> None:
    # harness/run/contract.py: a stride above the MR limit is rejected with ValueError before
    # any register_buffer call; any other exception is the wrong error
    wrong = buf(error=RuntimeError("no"), seq_start=0, seq_end=1)
    vs = check_mooncake_run(McRecord(128, "rejected", True, [wrong], []))
    assert [v.rule for v in vs] == ["rejected-wrong-error"], vs
    assert vs[0].message == ("register() of kv_buffer rejected the stride with RuntimeError: "
                             "no; expected ValueError")
    right = buf(error=ValueError("stride above the limit"), seq_start=0, seq_end=1)
    assert check_mooncake_run(McRecord(128, "rejected", True, [right], [])) == []
    other = buf(error=RuntimeError("no"), seq_start=0, seq_end=1)
    assert "rejected-wrong-error" not in [
        v.rule for v in check_mooncake_run(McRecord(128, "register-error", True, [other], []))]


def test_an_mr_that_starts_before_the_buffer_and_covers_it_registers_it() -> None:
    # MRs never overlap, so the one just below the base is the only earlier one that can
    # reach into the buffer: an MR from 64 bytes below the base past its end covers it whole
    r = McRecord(128, "success", False, [buf()], [reg(1, BASE - 64, 256 + 128)])
    (end,) = buffer_ends(r)
    assert end.live == [(BASE - 64, 256 + 128)], end
    assert "registered" not in [v.rule for v in check_mooncake_run(r)]


def test_a_pool_with_no_buffer_that_was_not_rejected_is_judged_before_any_call() -> None:
    vs = check_mooncake_run(McRecord(128, "rejected", True, [], []))
    assert [(v.rule, v.seq) for v in vs] == [("not-rejected", 0)]
