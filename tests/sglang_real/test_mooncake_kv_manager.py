"""SGLang 0.5.23's Mooncake KV manager registration, as it ships, on the fake engine.

What the wheel does (``mooncake_transfer_engine.py``, ``disaggregation/mooncake/conn.py``;
docs/real-code-trials.md §8): ``register_buffer_to_engine`` drops zero-length entries and
exact duplicates, makes one ``batch_register_memory`` of the KV, aux and state regions through
the wrapper's ``batch_register``, which logs a failure **at DEBUG** and returns the code, and
the manager ignores that code: a server whose registration failed starts as if it had not
(issue 28, "callers that only log at DEBUG and ignore the result"). The engine's answers are
those of docs/mooncake-verbs.md §8.2-§8.3; GPU MRs fail with EFAULT without nvidia-peermem
(§5.5, docs/cuda-runtime.md §14.4).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
import sglang_mooncake

from kvreg.fakes.mooncake import TeError

from ..helpers.kv_transfer import HOST, Pair, segment_of

MiB = 1 << 20
LAYERS, LAYER_BYTES, ITEM = 4, 8 * MiB, 64 << 10
CONTEXT = int(TeError.ERR_CONTEXT)              # -202: ibv_reg_mr failed (§8.2)
OVERLAPPED = int(TeError.ERR_ADDRESS_OVERLAPPED)
NOT_REGISTERED = int(TeError.ERR_ADDRESS_NOT_REGISTERED)
MTE_LOGGER = "sglang.srt.distributed.device_communicators.mooncake_transfer_engine"


@pytest.fixture(scope="module")
def sg() -> Any:
    return sglang_mooncake.load()


@pytest.fixture
def shared_engine(sg: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """SGLang's process-wide engine slot, empty for each test (the module global that
    ``init_mooncake_transfer_engine`` fills once per process)."""
    monkeypatch.setattr(sg.mte, "_mooncake_transfer_engine", None)
    monkeypatch.delenv("MC_FORCE_TCP", raising=False)
    yield


def _node_kv(pair: Pair, node: str) -> tuple[list[tuple[int, int, int]],
                                             list[tuple[int, int, int]]]:
    """Per-layer K and V ``cudaMalloc`` blocks and one host aux buffer of ``node``."""
    n = pair.nodes[node]
    kv = [(n.gpu_block(LAYER_BYTES), LAYER_BYTES, ITEM) for _ in range(2 * LAYERS)]
    aux = [(n.host_buffer(MiB), MiB, 4096)]
    return kv, aux


def _sglang_on(sg: Any, pair: Pair, node: str, args: Any) -> Any:
    """SGLang's shared engine on ``node`` and a manager that registered ``args``."""
    with pair.on(node):
        sg.mte.init_mooncake_transfer_engine(hostname=HOST, gpu_id=0)
    mgr = sglang_mooncake.manager(sg, args)
    mgr.register_buffer_to_engine()
    return mgr


def test_every_region_registered_once_and_released(sg: Any, shared_engine: None) -> None:
    pair = Pair()
    kv, aux = _node_kv(pair, "prefill")
    # the unified pool reports one raw buffer as KV and as state (deduped by SGLang), and
    # DSA's elided index-K layers are 0-row buffers (skipped: the engine refuses length 0)
    state = [[kv[0], (kv[1][0], 0, ITEM)]]
    mgr = _sglang_on(sg, pair, "prefill", sglang_mooncake.kv_args(sg, kv, aux, state))
    engine = mgr.engine.engine
    want = sorted((p, n) for p, n, _ in kv + aux)
    assert pair.registered(engine) == want
    assert pair.fake.trace.codes("batch_register_memory") == [0]   # one batch, each once
    assert len(pair.gpu_mrs("prefill")) == len(want)
    mgr.deregister_buffer_to_engine()
    assert pair.registered(engine) == [] and pair.gpu_mrs("prefill") == []
    assert pair.fake.leak_report() == ""


def test_a_failed_registration_is_logged_at_debug_and_dropped(
        sg: Any, shared_engine: None, caplog: pytest.LogCaptureFixture) -> None:
    """The bug: without nvidia-peermem every GPU MR fails (EFAULT, §5.5), the engine returns
    -202 and rolls the batch back (#2869), SGLang logs it at DEBUG and starts; the first
    transfer into its KV cache fails."""
    pair = Pair(gpu="no-peermem")
    kv, aux = _node_kv(pair, "decode")
    caplog.set_level(logging.DEBUG, logger=MTE_LOGGER)
    mgr = _sglang_on(sg, pair, "decode", sglang_mooncake.kv_args(sg, kv, aux))
    assert mgr.register_buffer_to_engine() is None             # no code, no exception
    assert pair.fake.trace.codes("batch_register_memory") == [CONTEXT, CONTEXT]
    records = [r for r in caplog.records if r.name == MTE_LOGGER]
    assert [(r.levelno, r.getMessage()) for r in records] == \
        [(logging.DEBUG, "Mooncake batch memory registration failed.")] * 2
    assert pair.registered(mgr.engine.engine) == []
    # the prefill side's first write into the decode KV cache: -1 (no published buffer)
    sender = pair.engine("prefill")
    src = pair.prefill.gpu_block(LAYER_BYTES)
    assert sender.register_memory(src, LAYER_BYTES) == CONTEXT  # same machine: no peermem
    assert sender.transfer_sync_write(segment_of(mgr.engine.engine), src, kv[0][0],
                                      ITEM) == -1


@pytest.mark.parametrize(("version", "code", "left"), [
    ("v0.3.13", CONTEXT, 0),     # #2869: the first error returned, the batch rolled back
    ("v0.3.11", 0, 9),           # before: a warning per buffer, 0, every region in the map
])
def test_one_mr_failing_in_the_batch(sg: Any, shared_engine: None, version: str, code: int,
                                     left: int) -> None:
    """One ``ibv_reg_mr`` of the batch fails (ENOMEM, the NIC's MR table full, §5.2)."""
    pair = Pair(version)
    kv, aux = _node_kv(pair, "prefill")
    pair.fake.fabric.inject("reg_mr", nth=3, error="ENOMEM")
    mgr = _sglang_on(sg, pair, "prefill", sglang_mooncake.kv_args(sg, kv, aux))
    assert pair.fake.trace.codes("batch_register_memory") == [code]
    assert len(pair.registered(mgr.engine.engine)) == left
    # before v0.3.12 the engine's map holds the third layer with no MR behind it: no code
    # of SGLang's could have seen that
    assert len(pair.gpu_mrs("prefill")) == (left - 1 if left else 0)


@pytest.mark.parametrize(("version", "code", "mrs"), [("v0.3.13", OVERLAPPED, 0),
                                                      ("v0.3.11", 0, 3)])
def test_the_same_buffer_reported_with_two_lengths(sg: Any, shared_engine: None, version: str,
                                                   code: int, mrs: int) -> None:
    """SGLang removes exact duplicates only: a buffer reported again with a shorter length is
    an overlap; v0.3.12+ refuses the whole batch (#2854), dropped at DEBUG; before, both
    entries became MRs (§8.3: no in-batch overlap check)."""
    pair = Pair(version)
    n = pair.prefill
    kv = [(n.gpu_block(LAYER_BYTES), LAYER_BYTES, ITEM) for _ in range(2)]
    state = [[(kv[0][0], LAYER_BYTES // 2, ITEM)]]
    mgr = _sglang_on(sg, pair, "prefill", sglang_mooncake.kv_args(sg, kv, (), state))
    assert pair.fake.trace.codes("batch_register_memory") == [code]
    assert len(pair.gpu_mrs("prefill")) == mrs
    assert mgr.kv_args.state_data_lens == [[LAYER_BYTES // 2]]


def test_a_failed_unregister_is_logged_at_debug_and_dropped(
        sg: Any, shared_engine: None, caplog: pytest.LogCaptureFixture) -> None:
    pair = Pair()
    kv, aux = _node_kv(pair, "prefill")
    mgr = _sglang_on(sg, pair, "prefill", sglang_mooncake.kv_args(sg, kv, aux))
    mgr.deregister_buffer_to_engine()
    caplog.set_level(logging.DEBUG, logger=MTE_LOGGER)
    mgr.deregister_buffer_to_engine()                 # a second teardown: -3, not raised
    assert pair.fake.trace.codes("batch_unregister_memory") == [0, NOT_REGISTERED]
    assert [r.getMessage() for r in caplog.records if r.name == MTE_LOGGER] == \
        ["Mooncake batch memory deregistration failed."]


def test_the_wrappers_single_calls_raise(sg: Any, shared_engine: None) -> None:
    """``register`` / ``deregister`` (one buffer) raise RuntimeError naming the code; only the
    batch calls, the ones the KV manager uses, log and return."""
    pair = Pair()
    with pair.on("prefill"):
        te = sg.mte.init_mooncake_transfer_engine(hostname=HOST, gpu_id=0)
    base = pair.prefill.gpu_block(LAYER_BYTES)
    te.register(base, LAYER_BYTES)
    with pytest.raises(RuntimeError, match=rf"registration failed \(ret={OVERLAPPED}\)"):
        te.register(base + MiB, MiB)
    te.deregister(base)
    with pytest.raises(RuntimeError, match=rf"deregistration failed \(ret={NOT_REGISTERED}\)"):
        te.deregister(base)
    assert te.get_session_id() == segment_of(te.engine)
