"""Fault plans (fault points, triggers and actions)."""

from __future__ import annotations

import time

import pytest
import torch

from kvreg.fakes.cuda.errors import API_ERRORS
from kvreg.fakes.cuda.fake_cuda import FakeCuda
from kvreg.fakes.faults import FaultPlan, FaultPlanError

GiB = 1 << 30


def _register_n(fake: FakeCuda, n: int, size: int = 1 << 20) -> list[int]:
    buf = fake.virtual(n * size * 2, name="pool")
    codes = []
    for i in range(n):
        codes.append(int(fake.torch.cudaHostRegister(buf.data_ptr() + 2 * i * size, size, 0)))
    return codes


def test_nth_fires_once_on_that_call() -> None:
    fake = FakeCuda()
    fake.inject("cudaHostRegister", nth=3, error=2)
    assert _register_n(fake, 5) == [0, 0, 2, 0, 0]
    assert len(fake.live_registrations()) == 4


def test_after_fires_on_every_later_call_and_times_bounds_it() -> None:
    fake = FakeCuda()
    fake.faults.arm("cudart.cudaHostRegister", error=1, after=2, times=2)
    assert _register_n(fake, 6) == [0, 0, 1, 1, 0, 0]


def test_times_alone_fires_on_the_first_calls() -> None:
    fake = FakeCuda()
    fake.faults.arm("cudart.cudaHostRegister", error="cudaErrorInvalidValue", times=2)
    assert _register_n(fake, 4) == [1, 1, 0, 0]


def test_predicate_sees_size_and_buffer_offset() -> None:
    fake = FakeCuda()
    buf = fake.virtual(8 * GiB, name="kv")
    fake.faults.arm("cudart.cudaHostRegister", error=2,
                    predicate=lambda c: c.buffer == "kv" and c.offset == 2 * GiB)
    codes = [int(fake.torch.cudaHostRegister(buf.data_ptr() + i * GiB, GiB, 0)) for i in range(4)]
    assert codes == [0, 0, 2, 0]


def test_when_table_from_a_scenario_file() -> None:
    fake = FakeCuda()
    fake.faults.arm_from_dict({"point": "cudart.cudaHostRegister", "error": 2,
                               "when": {"size_ge": 2 * GiB}, "times": 5})
    buf = fake.virtual(16 * GiB)
    assert int(fake.torch.cudaHostRegister(buf.data_ptr(), GiB, 0)) == 0
    assert int(fake.torch.cudaHostRegister(buf.data_ptr() + 4 * GiB, 2 * GiB, 0)) == 2


def test_probability_needs_a_seed_and_repeats_with_it() -> None:
    plan = FaultPlan()
    with pytest.raises(FaultPlanError, match="needs a seed"):
        plan.arm("cudart.cudaHostRegister", error=1, probability=0.5)
    runs = []
    for _ in range(2):
        fake = FakeCuda()
        fake.faults.arm("cudart.cudaHostRegister", error=1, probability=0.5, seed=7)
        runs.append(_register_n(fake, 40))
    assert runs[0] == runs[1]
    assert 0 < runs[0].count(1) < 40  # it really is random, not all-or-nothing


def test_error_must_be_one_the_api_can_return() -> None:
    plan = FaultPlan()
    # docs/cuda-runtime.md §3: cudaHostUnregister returns only 1, 713 (and init errors)
    with pytest.raises(FaultPlanError, match="cannot return 2") as info:
        plan.arm("cudart.cudaHostUnregister", error=2)
    assert "713 cudaErrorHostMemoryNotRegistered" in str(info.value)
    assert len(plan) == 0  # nothing armed after a rejected call


@pytest.mark.parametrize("bad", [
    dict(point="cudart.cudaHostRegistr", error=1),
    dict(point="", error=1),
    dict(point="cudart.cudaHostRegister", error=0),
    dict(point="cudart.cudaHostRegister", error="cudaErrorNope"),
    dict(point="cudart.cudaHostRegister", error=1, nth=0),
    dict(point="cudart.cudaHostRegister", error=1, probability=2.0, seed=1),
    dict(point="cudart.cudaHostRegister"),
])
def test_bad_plans_are_rejected_and_change_nothing(bad: dict[str, object]) -> None:
    plan = FaultPlan()
    point = bad.pop("point")
    with pytest.raises(FaultPlanError):
        plan.arm(point, **bad)  # type: ignore[arg-type]
    assert len(plan) == 0


def test_unknown_point_suggests_the_close_one() -> None:
    with pytest.raises(FaultPlanError, match=r"did you mean cudart\.cudaHostRegister"):
        FaultPlan().arm("cudart.cudaHostRegistr", error=1)


def test_group_point_skips_apis_that_cannot_return_the_code() -> None:
    fake = FakeCuda()
    fake.faults.arm("cudart.*", error=712, times=10)
    buf = fake.virtual(1 << 20)
    # 712 is valid for cudaHostRegister only; cudaHostUnregister is left alone
    assert int(fake.torch.cudaHostRegister(buf.data_ptr(), 4096, 0)) == 712
    assert int(fake.torch.cudaHostUnregister(buf.data_ptr())) == 713  # the real answer


def test_raise_and_delay_actions() -> None:
    fake = FakeCuda()
    fake.faults.arm("cudart.cudaHostRegister", raise_=KeyboardInterrupt, nth=1)
    buf = fake.virtual(1 << 20)
    with pytest.raises(KeyboardInterrupt):
        fake.torch.cudaHostRegister(buf.data_ptr(), 4096, 0)
    assert fake.trace[-1].injected
    fake.faults.clear()
    fake.faults.arm("cudart.cudaHostRegister", delay=0.01, nth=1)
    slept: list[float] = []
    real_sleep = time.sleep
    time.sleep = slept.append  # type: ignore[assignment]
    try:
        assert fake.torch.cudaHostRegister(buf.data_ptr(), 4096, 0) == 0  # delayed, then real
    finally:
        time.sleep = real_sleep
    assert slept == [0.01]
    assert not fake.trace[-1].injected  # a delay passes the call through to the fake
    assert len(fake.live_registrations()) == 1
    fake.torch.cudaHostUnregister(buf.data_ptr())


def test_injected_error_looks_real_on_both_faces() -> None:
    fake = FakeCuda()
    buf = fake.virtual(1 << 20)
    fake.inject("cudaHostRegister", nth=1, error=2)
    res = fake.torch.cudaHostRegister(buf.data_ptr(), 4096, 0)
    assert type(res) is fake.torch.cudaError and res == 2 and bool(res)
    fake.inject("cudaHostGetDevicePointer", nth=1, error=1)
    out = fake.runtime.cudaHostGetDevicePointer(buf.data_ptr(), 0)
    assert out == (fake.runtime.cudaError_t.cudaErrorInvalidValue, None)
    # the failure is pending in the runtime instance that saw it (docs/cuda-runtime.md §6)
    assert int(fake.runtime.cudaGetLastError()[0]) == 1
    assert not fake.live_registrations()


def test_every_api_with_a_table_is_a_fault_point() -> None:
    plan = FaultPlan()
    for api, codes in API_ERRORS.items():
        code = min(codes)
        plan.arm(f"cudart.{api}", error=code)
    assert len(plan) == len(API_ERRORS)
    assert all("cudart." in line for line in plan.describe())


def test_fault_on_torch_path_reaches_sglang_style_code() -> None:
    fake = FakeCuda()
    buf = fake.virtual(3 * GiB)
    fake.inject("cudaHostRegister", nth=2, error=2)
    with fake.patch():
        rt = torch.cuda.cudart()
        assert rt.cudaHostRegister(buf.data_ptr(), GiB, 0) == 0
        assert rt.cudaHostRegister(buf.data_ptr() + GiB, GiB, 0) == 2
        assert rt.cudaHostUnregister(buf.data_ptr()) == 0
    assert fake.trace.codes("cudaHostRegister") == [0, 2]
    assert [e.injected for e in fake.trace.calls("cudaHostRegister")] == [False, True]


@pytest.mark.parametrize(("extra", "said"), [
    ({"delay": "slow"}, "delay must be a number, got 'slow'"),
    ({"delay": [1]}, "delay must be a number, got [1]"),
    ({"probability": "half", "seed": 1}, "probability must be a number, got 'half'"),
    ({"probability": True, "seed": 1}, "probability must be a number, got True"),
    ({"when": "size_ge=1"}, "when must be a table, got 'size_ge=1'"),
])
def test_a_scenario_files_wrong_fault_value_is_one_sentence(extra: dict[str, object],
                                                           said: str) -> None:
    """A fault table from a scenario file with a value of the wrong type is a FaultPlanError
    naming the field (the CLI's exit 2 line), never a TypeError from deep in arm()."""
    plan = FaultPlan()
    with pytest.raises(FaultPlanError) as info:
        plan.arm_from_dict({"point": "cudart.cudaHostRegister", "error": 2, **extra})
    assert str(info.value) == f"fault on 'cudart.cudaHostRegister': {said}"
    assert not plan.rules
