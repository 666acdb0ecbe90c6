"""vLLM 0.33.0's ``NixlConnectorWorker`` registration, run from the wheel's files.

``NixlBaseConnectorWorker.register_kv_caches`` and ``unregister_kv_caches``
(``kv_connector/v1/nixl/base_worker.py``, the class the pull and push workers share) run as
they ship, with ``nixl/metadata.py`` (``NixlAgentMetadata``, ``NixlHandshakePayload``, which
registration builds and encodes) loaded from the wheel too. The worker is made without its
constructor (``object.__new__``), with what those methods read set as ``__init__`` sets it for
one TP rank, no pipeline or context parallelism, no host staging buffer, no Mamba layer: the
agent (``nixl_wrapper``: the node's ``nixl._api.nixl_agent``, as vLLM's ``NixlWrapper`` is
NIXL's class), backends ``["UCX"]``, VRAM as the platform's ``nixl_memory_type``, the KV cache
config's block count, a device-resident transfer group and a host-resident one (vLLM's
HiSparse host pool, for host buffers), each layer's spec. Stand-ins,
each for a step registration does not need:

- ``compute_nixl_compatibility_hash`` returns a constant: the hash is compared at the peers'
  handshake only and reads the whole ``VllmConfig``;
- ``register_local_xfer_handler`` (after the ``register_memory`` calls) prepares the local
  blocks as NIXL strided (Nx5) descriptor lists, which kvreg's fake agent does not model
  (docs/nixl.md §2): it returns a prepared-list stand-in whose ``release()`` does nothing,
  and the blocks it would have described;
- ``TransferTopology`` (``kv_connector/utils.py``) keeps the arguments it is made with:
  the geometry the transfers read later.
"""

from __future__ import annotations

import types
from collections import defaultdict
from typing import Any

import numpy as np
import vllm_source

__all__ = ["load", "worker"]

_MODULE: types.ModuleType | None = None
META = "vllm.distributed.kv_transfer.kv_connector.v1.nixl.metadata"
UTILS = "vllm.distributed.kv_transfer.kv_connector.utils"


class TransferTopology(types.SimpleNamespace):
    """The transfers' geometry, as recorded at registration."""


def load() -> types.ModuleType:
    """The worker module (with the wheel's metadata module), loaded once."""
    global _MODULE
    if _MODULE is None:
        meta = vllm_source.load(vllm_source.NIXL_METADATA)
        names = {k: v for k, v in vars(meta).items() if not k.startswith("__")}
        names["compute_nixl_compatibility_hash"] = _compat_hash
        _MODULE = vllm_source.load(vllm_source.NIXL_WORKER, {
            META: names, UTILS: {"TransferTopology": TransferTopology}})
    return _MODULE


def _compat_hash(vllm_config: Any, attn_backend_name: str, transfer_mode: str = "pull") -> str:
    return f"kvreg-{attn_backend_name}-{transfer_mode}"


class _Unprepared:
    """What ``register_local_xfer_handler``'s prepared list is here: nothing to release."""

    def release(self) -> None:
        return None


def _local_handler(w: Any) -> Any:
    def register_local_xfer_handler(block_size: int) -> tuple[Any, np.ndarray]:
        return _Unprepared(), np.zeros((0, 5), dtype=np.uint64)
    return register_local_xfer_handler


def worker(mod: types.ModuleType, agent: Any, specs: dict[str, Any], num_blocks: int,
           *, use_mla: bool = False, block_size: int = 16, engine_id: str = "kvreg",
           host: dict[str, int] | None = None) -> Any:
    """A worker of one TP rank whose ``nixl_wrapper`` is ``agent``. ``host``: the layers of
    a host-resident transfer group (vLLM's HiSparse host pool) and its block count."""
    host = host or {}
    host_blocks = max(host.values(), default=None)
    w = object.__new__(mod.NixlBaseConnectorWorker)
    w.nixl_wrapper, w.nixl_backends, w.nixl_memory_type = agent, ["UCX"], "VRAM"
    w.engine_id, w.tp_rank, w.transfer_tp_rank, w.transfer_tp_size = engine_id, 0, 0, 1
    w.block_size, w.use_mla, w.dcp_size, w.pcp_size, w.pp_size = block_size, use_mla, 1, 1, 1
    w.vllm_config = types.SimpleNamespace(speculative_config=None)
    w.model_config = types.SimpleNamespace(get_total_num_kv_heads=lambda: 1)
    w.attn_backends, w.backend_name = [], "FLASH_ATTN"
    w.kv_cache_layout = w.host_buffer_kv_cache_layout = "HND"
    w._has_mamba = w._has_packed_cache = w._is_csa_linear = w._is_hma_required = False
    w.use_host_buffer, w.kv_buffer_device, w.host_xfer_buffers = False, "cuda", {}
    w.kv_cache_config = types.SimpleNamespace(
        num_blocks=num_blocks,
        transfer_group_index_by_layer={k: int(k in host) for k in specs},
        transfer_groups=[types.SimpleNamespace(host_resident=False),
                         types.SimpleNamespace(host_resident=True)],
        hisparse_host_num_blocks=host_blocks, hisparse_shared_host_pool=False)
    w.num_blocks, w._logical_num_blocks = num_blocks, num_blocks
    w._physical_blocks_per_logical_kv_block = 1
    w._layer_specs = dict(specs)
    w._head_sharded_draft_kv_heads = None
    w.device_id, w._mamba_ssm_size = 0, (0, 0)
    w.block_len_per_layer, w.block_stride_per_layer, w.region_group_ids = [], [], []
    w.region_names, w.region_num_blocks, w._region_is_mla = [], [], []
    w._transfer_layer_region_indices = ()
    w.kv_caches_base_addr = defaultdict(dict)
    w._registered_descs, w._kv_unregistered = [], False
    w.dst_num_blocks, w.dst_region_num_blocks, w.dst_region_group_ids = {}, {}, {}
    w.dst_uses_region_group_mapping, w.dst_region_mem_types = {}, {}
    w.src_xfer_handles_by_block_size, w.src_xfer_handles_by_tp_ratio = {}, {}
    w._dram_src_handles_by_tp_ratio, w._dram_src_handles_by_block_size = {}, {}
    w._remote_agents, w._recving_transfers = {}, {}
    w.register_local_xfer_handler = _local_handler(w)
    return w
