"""A query that verifies a chunk after its successful register fails.

Code that checks each chunk with ``cudaHostGetDevicePointer``, ``cudaPointerGetAttributes`` or
``cuMemHostGetFlags`` before recording it holds a registered-but-unverified chunk when the
query fails: it must release that chunk too. The catalog's ``query_faults.toml`` files fail each
query (codes from the documented return lists: cuda-bindings 13.5 docstrings, copied from
cuda_runtime_api.h / cuda.h); code that never queries passes them, the fault never firing.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from kvreg.fakes.cuda import driver_face  # noqa: F401  (declares the cudriver.* points)
from kvreg.fakes.cuda.errors import INIT_ERRORS
from kvreg.fakes.faults import FAULT_POINTS, FaultPlan, FaultPlanError
from kvreg.harness.run.core import run_scenario
from kvreg.harness.run.implementation import make_implementation
from kvreg.harness.scenario.format import bundled_root, load_file

IMPLS = Path(__file__).parent / "impls"
FILES = ("mla/query_faults", "mha/query_faults")


@pytest.mark.parametrize(("point", "documented"), [
    # cudaSuccess, cudaErrorInvalidValue, cudaErrorMemoryAllocation
    ("cudart.cudaHostGetDevicePointer", {1, 2}),
    # cudaSuccess, cudaErrorInvalidDevice, cudaErrorInvalidValue
    ("cudart.cudaPointerGetAttributes", {1, 101}),
])
def test_runtime_query_points_take_the_documented_codes(point: str, documented: set[int]) -> None:
    codes = FAULT_POINTS[point]
    assert codes is not None and set(codes) - INIT_ERRORS == documented


def test_driver_query_point_takes_the_documented_codes() -> None:
    # CUDA_SUCCESS, DEINITIALIZED (4), NOT_INITIALIZED (3), INVALID_CONTEXT (201), INVALID_VALUE
    assert FAULT_POINTS["cudriver.cuMemHostGetFlags"] == {1, 3, 4, 201}


def test_an_undocumented_code_is_refused() -> None:
    """17 (cudaErrorInvalidDevicePointer) is not among cudaPointerGetAttributes' results."""
    with pytest.raises(FaultPlanError):
        FaultPlan().arm_from_dict({"point": "cudart.cudaPointerGetAttributes", "nth": 1,
                                   "error": 17})


def _scenarios() -> list:
    root = bundled_root()
    return [sc for name in FILES for sc in load_file(root / f"{name}.toml", root)]


def _impl(name: str, style: str):
    return make_implementation(f"{IMPLS / (name + '.py')}:register", None, style)


def _point(sc) -> str:
    (fault,) = sc.faults
    return str(fault["point"])


def test_each_query_is_failed_on_every_pool() -> None:
    scenarios = _scenarios()
    for file in FILES:
        points = {_point(sc) for sc in scenarios if sc.id.startswith(file + "/")}
        assert points == {"cudart.cudaHostGetDevicePointer", "cudart.cudaPointerGetAttributes",
                          "cudriver.cuMemHostGetFlags"}
    assert all(sc.expect == "register-error" for sc in scenarios)


@pytest.mark.parametrize(("name", "style"), [
    ("kvreg.harness.cuda.reference", "generic"),  # never queries: the fault never fires
    ("verified_chunks", "ctypes"),                # runtime queries, releases the failed chunk
    ("verified_chunks_driver", "driver"),         # cuMemHostGetFlags, releases it too
])
def test_correct_code_passes_every_query_fault(name: str, style: str) -> None:
    impl = (make_implementation(f"{name}:register", None, style) if name.startswith("kvreg")
            else _impl(name, style))
    for sc in _scenarios():
        result = run_scenario(sc, impl)
        assert result.verdict == "pass", (sc.id, result.violations)


@pytest.mark.parametrize(("name", "style", "family"), [
    ("verified_chunks", "ctypes", "cudart."), ("verified_chunks_driver", "driver", "cudriver."),
])
def test_the_fault_fires_for_code_that_queries(name: str, style: str, family: str) -> None:
    """Proof that the passes above are earned: expecting success instead, the same runs fail
    because register raised on the query the scenario fails."""
    for sc in _scenarios():
        if not _point(sc).startswith(family):
            continue
        result = run_scenario(dataclasses.replace(sc, expect="success"), _impl(name, style))
        assert result.verdict == "fail", sc.id
        assert result.violations[0].rule == "unexpected-error"
        assert _point(sc).split(".")[1] in result.violations[0].message


@pytest.mark.parametrize(("name", "style", "family"), [
    ("records_after_verify", "ctypes", "cudart."),
    ("records_after_verify_driver", "driver", "cudriver."),
])
def test_code_that_forgets_the_unverified_chunk_is_caught(name: str, style: str,
                                                          family: str) -> None:
    impl = _impl(name, style)
    caught = 0
    for sc in _scenarios():
        result = run_scenario(sc, impl)
        if not _point(sc).startswith(family):
            # its own query never fails there: it is correct code
            assert result.verdict == "pass", (sc.id, result.violations)
            continue
        caught += 1
        assert result.verdict == "fail", sc.id
        (v,) = [v for v in result.violations if v.rule == "not-rolled-back"]
        nth = int(sc.faults[0]["nth"])
        assert "is still registered after register() of kv_buffer failed" in v.message
        # the chunk left is the one whose query failed: the nth
        assert f"{'no' if nth == 1 else 'partial'} rollback" in v.message, v.message
        if nth > 1:
            assert f"released {nth - 1} of {nth} earlier chunk(s)" in v.message, v.message
    assert caught == 8 if family == "cudart." else caught == 4
