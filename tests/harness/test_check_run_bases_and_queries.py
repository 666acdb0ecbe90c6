"""Two judgements of harness/cuda/checks.py on the trace alone: a range that starts before its
buffer is named by its distance to the base (and the base's alignment when it has none), and a
fault that fired on a query verifying a chunk counts as the scenario's register error."""

from __future__ import annotations

from kvreg.fakes.recorder import TraceEntry
from kvreg.harness.cuda.checks import BufferRun, RunRecord, check_run
from kvreg.harness.pools.registry import make_geometry

GEO = make_geometry("mla", layout="page_first_direct", layer_num=2, kv_lora_rank=4,
                    qk_rope_head_dim=4, dtype="bfloat16", page_size=2, page_num=4)
SPEC = GEO.buffers()[0]
HUGE = 2 << 20


def _record(base: int, trace: list[TraceEntry], *, expect: str = "success",
            error: BaseException | None = None) -> RunRecord:
    b = BufferRun(0, SPEC, base, 64, error, None, error is None, 0, 50, None, 64)
    return RunRecord(GEO, 1 << 20, expect, None, [b], trace)


def _call(seq: int, api: str, args: tuple[int, ...], code: int = 0,
          injected: bool = False) -> TraceEntry:
    return TraceEntry(seq, "ctypes", api, args, code, code, injected, 0)


def test_a_range_below_an_unaligned_base_names_the_gap_and_the_alignment() -> None:
    base = 0x7F0000000000 + 4160
    got = check_run(_record(base, [_call(0, "cudaHostRegister", (base - 4160, 4160 + 256, 0))]))
    assert got[0].rule == "range-outside-buffer"
    assert "[kv_buffer-0x1040 (4160 bytes before kv_buffer, whose base " \
           f"{base:#x} is not 2 MiB-aligned), +4416)" in got[0].message


def test_a_range_below_an_aligned_base_names_only_the_gap() -> None:
    base = 0x7F0000000000
    got = check_run(_record(base, [_call(0, "cudaHostRegister", (base - 64, 320, 0))]))
    assert "kv_buffer-0x40 (64 bytes before kv_buffer), +320)" in got[0].message
    assert "aligned" not in got[0].message
    far = check_run(_record(base, [_call(0, "cudaHostRegister", (base - HUGE - 64, 64, 0))]))
    assert "(outside every pool buffer)" in far[0].message


def test_a_fired_query_fault_is_the_register_error_an_unfired_one_is_not() -> None:
    base = 0x7F0000000000
    error = RuntimeError("cudaHostGetDevicePointer returned 1")
    fired = [_call(0, "cudaHostRegister", (base, 256, 0)),
             _call(1, "cudaHostGetDevicePointer", (0, base, 0), code=1, injected=True),
             _call(2, "cudaHostUnregister", (base,))]
    assert check_run(_record(base, fired, expect="register-error", error=error)) == []
    # the same raise with no fault fired (nor a failed registration) is unexpected
    unfired = [fired[0], _call(1, "cudaHostGetDevicePointer", (0, base, 0)), fired[2]]
    got = check_run(_record(base, unfired, expect="register-error", error=error))
    assert [v.rule for v in got] == ["unexpected-error"]
    # a query that failed by itself (not injected) is no scenario fault either
    own = [fired[0], _call(1, "cudaHostGetDevicePointer", (0, base, 0), code=1), fired[2]]
    assert [v.rule for v in check_run(_record(base, own, expect="register-error",
                                              error=error))] == ["unexpected-error"]
