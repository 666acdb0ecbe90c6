"""vLLM 0.33.0's MooncakeConnector registration as a ``gpu_rdma`` implementation
(``mooncake_engine`` style), from the wheel's bytes (``KVREG_VLLM_SRC``, .ci/vllm-connectors).

``MooncakeConnectorWorker.register_kv_caches`` / ``unregister_kv_caches`` run as they ship
(docs/real-code-trials.md §9). What the adapter does around them, nothing more:

- the worker is made as ``vllm_mooncake.worker`` makes it, its engine the one kvreg hands in
  (the constructor would build and initialize its own);
- every buffer becomes one layer of ``kv_caches``: a CUDA tensor stand-in
  (tests/helpers/device_tensor.py) of ``nbytes // item_len`` blocks of ``item_len`` bytes
  (one flat row when the item does not divide the buffer), its own storage (a tensor the
  caching allocator made), named ``model.layers.<i>.<name>``; KV and aux buffers get an
  ``AttentionSpec`` of one block per page, state buffers a ``MambaSpec``. vLLM registers
  whatever tensors ``kv_caches`` holds, host ones included;
- ``handle`` is the worker; teardown is its ``unregister_kv_caches``;
- around a memory saver's pause (``pause_resume``, docs/gpu-rdma.md §7) ``release`` is the
  worker's ``unregister_kv_caches`` and ``resume`` its ``restore_kv_caches`` (one
  ``batch_register_memory`` of the bases it saw, result checked): the pair the connector
  offers for vLLM's sleep mode (``supports_sleep_mode`` is true over RDMA); the order around
  the unmapping is the caller's, as SGLang's is (inferred, the caller is not in the files).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
for p in (HERE.parent, HERE.parents[1]):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import vllm_mooncake  # noqa: E402
from helpers.device_tensor import DeviceStorage, DeviceTensor  # noqa: E402
from vllm_stubs import AttentionSpec, MambaSpec  # noqa: E402

__all__ = ["register", "teardown"]


def _tensor(ptr: int, nbytes: int, item: int, device: int) -> DeviceTensor:
    shape = (nbytes // item, item) if item and nbytes % item == 0 else (nbytes,)
    return DeviceTensor(DeviceStorage(ptr, nbytes, device), shape, torch.uint8)


def register(engine: Any, buffers: Any) -> Any:
    mod = vllm_mooncake.load()
    items = {**dict(zip(buffers.kv_data_ptrs, buffers.kv_item_lens, strict=True)),
             **dict(zip(buffers.aux_data_ptrs, buffers.aux_item_lens, strict=True)),
             **dict(zip(buffers.state_data_ptrs, buffers.state_item_lens, strict=True))}
    caches: dict[str, DeviceTensor] = {}
    specs: dict[str, Any] = {}
    for i, e in enumerate(buffers.entries):
        name = f"model.layers.{i}.{re.sub(r'[^A-Za-z_]', '_', e.name)}"
        item = items.get(e.ptr, 0)
        caches[name] = _tensor(e.ptr, e.nbytes, item, e.device)
        spec = MambaSpec if e.group == "state" else AttentionSpec
        specs[name] = spec(item or e.nbytes)
    blocks = max((t.shape[0] for t in caches.values()), default=1)
    w = vllm_mooncake.worker(mod, "", specs, blocks, engine=engine)
    w.register_kv_caches(caches)
    return w


def teardown(engine: Any, handle: Any) -> None:
    handle.unregister_kv_caches()


def release(engine: Any, handle: Any) -> None:
    handle.unregister_kv_caches()


def resume(engine: Any, buffers: Any, handle: Any) -> Any:
    handle.restore_kv_caches()
    return handle
