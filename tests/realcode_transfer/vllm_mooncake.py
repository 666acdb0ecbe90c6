"""vLLM 0.33.0's ``MooncakeConnectorWorker`` registration, run from the wheel's file.

``register_kv_caches`` and ``unregister_kv_caches`` run as they ship. The worker is made
without its constructor (``object.__new__``), with only what those two methods read set as
the constructor would set it: the engine (the module's own ``TransferEngine``, initialized as
``__init__`` does: P2P handshake, protocol ``rdma``), the KV cache config's block count and
group per layer, each layer's spec, and the consumer role (``kv_consumer``: the producer's
extra step after registration starts the side-channel listener, which is networking, not
registration). ``__del__`` calls ``shutdown``, which reads the receiver loop and ZMQ context
the constructor made: stand-ins that own nothing are set so it returns quietly.
"""

from __future__ import annotations

import types
from collections import OrderedDict
from typing import Any

import vllm_source

__all__ = ["load", "worker"]

_MODULE: types.ModuleType | None = None


def load() -> types.ModuleType:
    """The connector module, loaded once (call it under ``FakeMooncake.patch()``: the module
    keeps the ``TransferEngine`` class it imported, a door that later patches redirect)."""
    global _MODULE
    if _MODULE is None:
        _MODULE = vllm_source.load(vllm_source.MOONCAKE)
    return _MODULE


class _Idle:
    """What ``shutdown`` reads of a loop or context the constructor would have started."""

    def is_running(self) -> bool:
        return False

    def term(self) -> None:
        return None


def worker(mod: types.ModuleType, hostname: str, specs: dict[str, Any], num_blocks: int,
           groups: dict[str, int] | None = None, engine: Any = None) -> Any:
    """A consumer-side ``MooncakeConnectorWorker`` whose engine is initialized (``engine``,
    or one the module's ``TransferEngine`` makes and initializes as ``__init__`` does)."""
    w = object.__new__(mod.MooncakeConnectorWorker)
    w.is_kv_consumer, w.is_kv_producer = True, False
    w.async_zmq_ctx, w.receiver_loop = _Idle(), _Idle()
    if engine is None:
        engine = mod.TransferEngine()
        if engine.initialize(hostname, "P2PHANDSHAKE", "rdma", "") != 0:
            raise RuntimeError("Mooncake Transfer Engine initialization failed.")
    w.engine = engine
    w.use_mla = False
    w.kv_cache_config = types.SimpleNamespace(
        num_blocks=num_blocks,
        transfer_group_index_by_layer=groups or dict.fromkeys(specs, 0))
    w._physical_blocks_per_logical_kv_block = 1
    w._layer_specs = dict(specs)
    w._prepared_transfer_regions = {}
    w._layout_by_peer = OrderedDict()
    w._acked_layout_peers = set()
    w.seen_base_addresses, w._kv_data_lens, w._kv_unregistered = [], [], False
    return w
