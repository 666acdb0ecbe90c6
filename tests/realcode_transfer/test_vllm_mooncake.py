"""vLLM 0.33.0's MooncakeConnector registration, from the wheel's bytes, on the fake engine.

``MooncakeConnectorWorker.register_kv_caches`` (``kv_connector/v1/mooncake/
mooncake_connector.py``; docs/real-code-trials.md §9): one ``batch_register_memory`` of every
distinct **storage** the layers' CUDA tensors view (``untyped_storage()``: base and byte size,
deduplicated by base), raising ``RuntimeError`` on any non-zero code; ``unregister_kv_caches``
one ``batch_unregister_memory`` of those bases, raising on failure and marking them released
only on success; ``restore_kv_caches`` registers the same bases and sizes again. The engine's
answers: docs/mooncake-verbs.md §8.2-§8.3; GPU MRs: §5.5.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import torch
import vllm_mooncake
from vllm_stubs import FullAttentionSpec, MambaSpec

from kvreg.fakes.mooncake import TeError

from ..helpers.device_tensor import DeviceStorage, DeviceTensor, empty
from ..helpers.kv_transfer import HOST, Pair

BLOCKS, BLOCK, HEADS, HEAD = 64, 16, 8, 128            # a page: 2 x 16 x 8 x 128 bf16
PAGE = 2 * BLOCK * HEADS * HEAD * 2
CONTEXT = int(TeError.ERR_CONTEXT)


@pytest.fixture
def pair() -> Iterator[Pair]:
    p = Pair()
    with p.on("decode"):
        yield p
    p.close()


def _mod() -> Any:
    return vllm_mooncake.load()


def _layers(p: Pair, n: int, node: str = "decode") -> dict[str, DeviceTensor]:
    drv = p.nodes[node].cuda.driver
    return {f"model.layers.{i}.self_attn.attn": empty(drv, (BLOCKS, 2, BLOCK, HEADS, HEAD))
            for i in range(n)}


def _worker(caches: dict[str, DeviceTensor], spec: Any = None) -> Any:
    spec = spec or FullAttentionSpec(PAGE)
    return vllm_mooncake.worker(_mod(), HOST, dict.fromkeys(caches, spec), BLOCKS)


def test_each_storage_registered_once_and_released(pair: Pair) -> None:
    caches = _layers(pair, 4)
    # two layers viewing one allocation (a shared KV tensor): one storage, one registration
    shared = empty(pair.decode.cuda.driver, (2, BLOCKS, 2, BLOCK, HEADS, HEAD))
    caches.update({"model.layers.4.self_attn.attn": shared[0],
                   "model.layers.5.self_attn.attn": shared[1]})
    w = _worker(caches)
    w.register_kv_caches(caches)
    storages = {t.untyped_storage() for t in caches.values()}
    assert pair.registered(w.engine) == sorted((s.ptr, s.size) for s in storages)
    assert pair.fake.trace.codes("batch_register_memory") == [0]
    assert w.kv_caches_base_addr == [t.data_ptr() for t in caches.values()]
    assert w.block_len_per_layer == [PAGE] * 6
    w.unregister_kv_caches()
    w.unregister_kv_caches()                       # released once: no second engine call
    assert pair.fake.trace.codes("batch_unregister_memory") == [0]
    assert pair.registered(w.engine) == [] and pair.gpu_mrs("decode") == []


def test_the_whole_storage_of_a_view_is_registered(pair: Pair) -> None:
    """A layer tensor inside a larger allocation: vLLM registers the storage, not the view."""
    drv = pair.decode.cuda.driver
    base = int(drv.device_alloc(2 * BLOCKS * PAGE, 0).base)
    storage = DeviceStorage(base, 2 * BLOCKS * PAGE)
    view = DeviceTensor(storage, (BLOCKS, 2, BLOCK, HEADS, HEAD), torch.bfloat16,
                        offset=BLOCKS * PAGE // 2)
    w = _worker({"model.layers.0.self_attn.attn": view})
    w.register_kv_caches({"model.layers.0.self_attn.attn": view})
    assert pair.registered(w.engine) == [(base, 2 * BLOCKS * PAGE)]
    assert w.kv_caches_base_addr == [base + BLOCKS * PAGE]


def test_a_failed_registration_raises() -> None:
    """Without nvidia-peermem the engine returns -202 and vLLM stops the worker: reported."""
    p = Pair(gpu="no-peermem")
    with p.on("decode"):
        caches = _layers(p, 2)
        w = _worker(caches)
        with pytest.raises(RuntimeError, match=r"^Mooncake batch memory registration failed"):
            w.register_kv_caches(caches)
    assert p.fake.trace.codes("batch_register_memory") == [CONTEXT]
    assert p.registered(w.engine) == [] and p.gpu_mrs("decode") == []


def test_before_v0_3_12_a_failed_mr_is_invisible_to_vllm() -> None:
    """The engine's bug (#2869): one MR fails, the batch returns 0; vLLM checks the code and
    cannot see it. The region sits in the engine's map with no MR behind it."""
    p = Pair("v0.3.11")
    with p.on("decode"):
        caches = _layers(p, 3)
        w = _worker(caches)
        p.fake.fabric.inject("reg_mr", nth=2, error="ENOMEM")
        w.register_kv_caches(caches)                   # no exception
    assert p.fake.trace.codes("batch_register_memory") == [0]
    assert len(p.registered(w.engine)) == 3 and len(p.gpu_mrs("decode")) == 2


def test_a_failed_unregister_raises_and_can_be_retried(pair: Pair) -> None:
    caches = _layers(pair, 2)
    w = _worker(caches)
    w.register_kv_caches(caches)
    pair.fake.inject("mooncake.engine.batch_unregister_memory", nth=1,
                     error="ERR_ADDRESS_NOT_REGISTERED")
    with pytest.raises(RuntimeError, match=r"^Mooncake batch memory unregistration failed"):
        w.unregister_kv_caches()
    assert w._kv_unregistered is False
    w.unregister_kv_caches()
    assert pair.registered(w.engine) == []


def test_restore_registers_the_same_ranges_again(pair: Pair) -> None:
    """The sleep/wake path: the same bases and sizes, so memory remapped elsewhere on wake
    would be registered at its old address."""
    caches = _layers(pair, 2)
    w = _worker(caches)
    w.register_kv_caches(caches)
    first = pair.registered(w.engine)
    w.unregister_kv_caches()
    w.restore_kv_caches()
    assert pair.registered(w.engine) == first
    assert pair.fake.trace.codes("batch_register_memory") == [0, 0]


def test_no_registrable_layer_raises(pair: Pair) -> None:
    caches = _layers(pair, 2)
    w = vllm_mooncake.worker(_mod(), HOST, {}, BLOCKS)     # no layer has a spec
    with pytest.raises(RuntimeError, match="No KV cache tensors were registered"):
        w.register_kv_caches(caches)
    assert pair.fake.trace.codes("batch_register_memory") == []


def test_mamba_state_layers_register_their_storage(pair: Pair) -> None:
    drv = pair.decode.cuda.driver
    caches = {"model.layers.0.mixer": empty(drv, (BLOCKS, 4096), torch.float32)}
    w = _worker(caches, MambaSpec(4096 * 4))
    w.register_kv_caches(caches)
    t = caches["model.layers.0.mixer"]
    assert pair.registered(w.engine) == [(t.data_ptr(), t.nbytes)]
