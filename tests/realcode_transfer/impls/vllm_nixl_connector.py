"""vLLM 0.33.0's NixlConnector registration as a ``gpu_rdma`` implementation (``nixl``
style), from the wheel's files (``KVREG_VLLM_SRC``, .ci/vllm-connectors).

``NixlBaseConnectorWorker.register_kv_caches`` / ``unregister_kv_caches`` run as they ship
(docs/real-code-trials.md §11). What the adapter does around them, nothing more:

- the worker is made as ``vllm_nixl.worker`` makes it, its ``nixl_wrapper`` the agent kvreg
  hands in (the constructor would make ``NixlWrapper(uuid, config)``, NIXL's own class);
- every buffer becomes one layer of ``kv_caches``, its own storage, named
  ``model.layers.<i>.<name>``, with a ``FullAttentionSpec``: a KV buffer a tensor stand-in
  (tests/helpers/device_tensor.py) of ``nbytes // item_len`` blocks of ``item_len`` bytes
  (the KV cache config's block count is theirs); a GPU state buffer a flat byte view of that
  many blocks (vLLM's HMA flat views: it registers the whole storage); a host (DRAM) buffer
  a CPU tensor stand-in of its items in vLLM's host-resident group (HiSparse), which vLLM
  registers as DRAM, devID 0;
- ``use_mla`` is the pool's: an MLA pool's KV buffers are ``kv<i>`` (harness/gpu_rdma/
  layout.py), an MHA pool's ``k<i>`` / ``v<i>``;
- ``handle`` is the worker; teardown is its ``unregister_kv_caches``;
- around a memory saver's pause (``pause_resume``, docs/gpu-rdma.md §7) ``release`` is the
  worker's ``unregister_kv_caches`` and ``resume`` its ``restore_kv_caches`` (the lists
  registered again, the local transfer handles and the agent metadata it hands peers made
  anew): the pair the connector offers for vLLM's sleep mode over UCX.
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

import vllm_nixl  # noqa: E402
from helpers.device_tensor import DeviceStorage, DeviceTensor  # noqa: E402
from vllm_stubs import FullAttentionSpec  # noqa: E402

__all__ = ["register", "teardown"]


class _HostTensor(DeviceTensor):
    """A CPU tensor's geometry at a host buffer (vLLM reads ``device.type == "cpu"``)."""

    is_cuda = False

    def __init__(self, storage: DeviceStorage, shape: Any, dtype: torch.dtype) -> None:
        super().__init__(storage, shape, dtype)
        self.device = torch.device("cpu")


def _rows(e: Any, item: int) -> tuple[int, ...]:
    return (e.nbytes // item, item) if item and e.nbytes % item == 0 else (e.nbytes,)


def register(agent: Any, buffers: Any) -> Any:
    mod = vllm_nixl.load()
    items = [*buffers.kv_item_lens, *buffers.aux_item_lens, *buffers.state_item_lens]
    kv = [_rows(e, item)[0] for e, item in zip(buffers.entries, items, strict=False)
          if e.group == "kv"]
    blocks = max(kv, default=1)
    caches: dict[str, DeviceTensor] = {}
    specs: dict[str, Any] = {}
    host: dict[str, int] = {}
    for i, (e, item) in enumerate(zip(buffers.entries, items, strict=True)):
        name = f"model.layers.{i}.{re.sub(r'[^A-Za-z_]', '_', e.name)}"
        storage = DeviceStorage(e.ptr, e.nbytes, e.device)
        if e.kind == "DRAM":
            shape = _rows(e, item)
            caches[name] = _HostTensor(storage, shape, torch.uint8)
            host[name] = shape[0]
            page = item or e.nbytes
        elif e.group == "kv":
            caches[name] = DeviceTensor(storage, _rows(e, item), torch.uint8)
            page = item or e.nbytes
        else:
            caches[name] = DeviceTensor(storage, (e.nbytes,), torch.uint8)
            page = e.nbytes // blocks
        specs[name] = FullAttentionSpec(page)
    use_mla = any(e.name.startswith("kv") for e in buffers.group("kv"))
    w = vllm_nixl.worker(mod, agent, specs, blocks, use_mla=use_mla, host=host)
    w.register_kv_caches(caches)
    return w


def teardown(agent: Any, handle: Any) -> None:
    handle.unregister_kv_caches()


def release(agent: Any, handle: Any) -> None:
    handle.unregister_kv_caches()


def resume(agent: Any, buffers: Any, handle: Any) -> Any:
    handle.restore_kv_caches()
    return handle
