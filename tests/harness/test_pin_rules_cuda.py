"""The CUDA target's rules at edges the rule registry's mutation samples found unpinned
(harness/cuda/checks.py, docs/mutation-testing.md, seeds 303 and 404 on the registry's blob).

Records are built by hand, as the real runtime's trace would show them: cudaHostUnregister
during an unloading runtime returns 4 cudaErrorCudartUnloading (docs/cuda-runtime.md §3.1), a
driver call with no current context 201 CUDA_ERROR_INVALID_CONTEXT (§13).
"""

from __future__ import annotations

import numpy as np

from kvreg.fakes.recorder import TraceEntry
from kvreg.harness.cuda.checks import BufferRun, RunRecord, check_run, check_warnings, plain_trace
from kvreg.harness.pools.registry import make_geometry

from .test_check_run_unit import BASE, record, reg, unreg


def test_a_chunk_released_and_registered_again_is_forgiven_at_unload() -> None:
    # chunk 1 was released and pinned again before teardown (both calls succeeded); teardown
    # met 4 on chunk 2 and never tried chunk 1: the runtime releases it as it unloads (§3.1),
    # whatever that chunk's earlier, successful, unregister was
    trace = [reg(1, BASE, 128), reg(2, BASE + 128, 128), unreg(3, BASE), reg(4, BASE, 128),
             unreg(60, BASE + 128, 4, injected=True)]
    r = record(trace, teardown_start=60, exercised=("register", "teardown"),
               live_end=[(BASE, 128), (BASE + 128, 128)])
    assert "leak" not in [v.rule for v in check_run(r)], check_run(r)
    assert [(w.rule, w.seq) for w in check_warnings(r)] == [("unregister-unloading", 60)] * 2


def test_a_register_failing_with_no_current_context_says_how_to_make_one() -> None:
    # CUDA_ERROR_INVALID_CONTEXT (201) from the driver API: no context on the calling thread
    # (docs/cuda-runtime.md §13); the message names the fix, and no other code gets it
    for code, hinted in ((201, True), (200, False), (202, False), (1, False)):
        err = RuntimeError(f"cuMemHostRegister failed: {code}")
        r = record([reg(1, BASE, 128, code=code)], error=err, seq_end=2)
        (v,) = [v for v in check_run(r) if v.rule == "unexpected-error"]
        assert ("no CUDA context is current on the calling thread" in v.message) is hinted, (
            code, v.message)


def test_an_injected_register_keeps_a_pointer_no_binding_would_take() -> None:
    # an injected fault records the call before any binding converted it (plain_trace):
    # a pointer the binding refuses stays the int recorded, kvreg reads it, never raises;
    # only the non-int size is read as a size_t
    e = TraceEntry(1, "torch", "cudaHostRegister", (-1, np.int64(128), 0), 1, 1, True, 0)
    (out,) = plain_trace([e])
    assert out.args == (-1, 128, 0) and type(out.args[1]) is int
    big = TraceEntry(2, "torch", "cudaHostRegister", (1 << 64, np.int64(64), 0), 1, 1, True, 0)
    assert plain_trace([big])[0].args == (1 << 64, 64, 0)


def test_a_failed_transfer_names_the_region_its_page_starts_in() -> None:
    # layer_first MLA: one buffer, a region per layer ([0, 128) and [128, 256)); row 1 is
    # page 0 of layer 1, at offset 128: the start of layer 1, the end of layer 0
    geo = make_geometry("mla", layout="layer_first", layer_num=2, kv_lora_rank=4,
                        qk_rope_head_dim=4, dtype="bfloat16", page_size=2, page_num=4)
    spec = geo.buffers()[0]
    assert [(g.name, g.offset) for g in spec.regions] == [("layer 0", 0), ("layer 1", 128)]
    trace = [reg(1, BASE, 144), reg(2, BASE + 144, 112), unreg(60, BASE), unreg(61, BASE + 144)]

    class T:
        ok, code, detail = False, 1, ""

        def __init__(self, row: int) -> None:
            self.failed_row = row

    for row, where in ((1, "page 0 of the layer 1 of kv_buffer [128, 160)"),
                       (0, "page 0 of the layer 0 of kv_buffer [0, 32)")):
        b = BufferRun(0, spec, BASE, 32, None, None, True, 0, 50, None, 32)
        r = RunRecord(geo, 256, "success", None, [b], trace, transfer=T(row),
                      teardown_start=60)
        msgs = [v.message for v in check_run(r) if v.rule == "transfer-failed"]
        assert len(msgs) == 1 and msgs[0].startswith(where), (row, msgs)
