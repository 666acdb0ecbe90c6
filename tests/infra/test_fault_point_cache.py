"""A fault plan answers each call from the rules it keeps per point (fakes/faults.py
``FaultPlan.check_call``): the answer must be the one the plan's whole rule list gives, a
rule armed later must apply at once, and a call's buffer is looked up only where a
predicate reads it (the call budget's does not; a scenario's ``when.buffer`` does)."""

from __future__ import annotations

from typing import Any

from kvreg.fakes.cuda.fake_cuda import FakeCuda
from kvreg.fakes.faults import CallInfo, FaultPlan, call_info
from kvreg.harness.run.budget import CallBudget


def _register(fake: FakeCuda, ptr: int, size: int = 1 << 20) -> int:
    return int(fake.torch.cudaHostRegister(ptr, size, 0))


def test_a_rule_armed_after_calls_applies_to_the_next_call() -> None:
    fake = FakeCuda()
    buf = fake.virtual(8 << 20, name="pool")
    fake.faults.arm("cudart.cudaHostUnregister", error=1, times=1)  # another point first
    assert _register(fake, buf.data_ptr()) == 0        # the point's rules are now kept
    fake.faults.arm("cudart.cudaHostRegister", error=2, times=1)
    assert _register(fake, buf.data_ptr() + (2 << 20)) == 2
    assert _register(fake, buf.data_ptr() + (4 << 20)) == 0


def test_cleared_plan_fires_nothing() -> None:
    fake = FakeCuda()
    buf = fake.virtual(4 << 20, name="pool")
    fake.faults.arm("cudart.cudaHostRegister", error=2)
    assert _register(fake, buf.data_ptr()) == 2
    fake.faults.clear()
    assert _register(fake, buf.data_ptr()) == 0


def test_check_call_gives_what_check_gives_and_counts_alike() -> None:
    calls: list[tuple[str, tuple[Any, ...]]] = [
        ("cudart.cudaHostRegister", (0x1000, 64)), ("cudart.cudaHostUnregister", (0x1000,)),
        ("cudart.cudaHostRegister", (0x2000, 128)), ("cudart.cudaHostRegister", (0x3000, 64))]

    def plan() -> FaultPlan:
        p = FaultPlan()
        p.arm("cudart.*", error=1, nth=2)
        p.arm("cudart.cudaHostRegister", error=2, predicate=lambda c: c.size == 64)
        return p

    whole, kept = plan(), plan()
    got_whole = [whole.check(call_info(pt, a, {})) for pt, a in calls]
    got_kept = [kept.check_call(pt, a, {}) for pt, a in calls]
    assert [r and (r.point, r.error) for r in got_whole] == \
        [r and (r.point, r.error) for r in got_kept]
    assert [(r.calls, r.fired) for r in whole.rules] == [(r.calls, r.fired) for r in kept.rules]
    assert [r and r.error for r in got_kept] == [2, 1, None, 2]


def test_buffer_resolved_only_for_a_predicate_that_reads_it() -> None:
    looked_up: list[int] = []

    def resolve(ptr: int) -> tuple[str, int]:
        looked_up.append(ptr)
        return "kv", ptr - 0x1000

    budget_plan = FaultPlan()
    budget = CallBudget(budget_plan, "cudart.*", 5, "CUDA")
    budget.counting = True
    assert budget_plan.check_call("cudart.cudaHostRegister", (0x1000, 64), {}, resolve) is None
    assert looked_up == [] and budget.spent == 1

    seen: list[CallInfo] = []

    def in_kv(c: CallInfo) -> bool:
        seen.append(c)
        return c.buffer == "kv"

    reading = FaultPlan()
    reading.arm("cudart.cudaHostRegister", error=2, predicate=in_kv)
    rule = reading.check_call("cudart.cudaHostRegister", (0x1040, 64), {}, resolve)
    assert rule is not None and looked_up == [0x1040]
    assert (seen[0].buffer, seen[0].offset) == ("kv", 0x40)
