"""SGLang 0.5.23's Mooncake KV-transfer registration, run as it ships on kvreg's fake engine.

Two pieces of the wheel (docs/real-code-trials.md §8):

- ``sglang/srt/distributed/device_communicators/mooncake_transfer_engine.py``: the process's
  shared ``MooncakeTransferEngine``, built by its own ``init_mooncake_transfer_engine`` (which
  imports ``mooncake.engine.TransferEngine``: the fake, while ``FakeMooncake.patch()`` holds)
  and initialized by its own ``initialize`` (P2P handshake, ``MOONCAKE_PROTOCOL``, default
  ``rdma``);
- ``sglang/srt/disaggregation/mooncake/conn.py``: ``MooncakeKVManager``'s
  ``init_engine``, ``register_buffer_to_engine`` and ``deregister_buffer_to_engine`` over a
  real ``KVArgs``.

The manager is made without its constructor (``object.__new__``): the constructor's other
work (the bootstrap server, ZMQ sockets, transfer threads, ``CommonKVManager``'s server
arguments) is no part of registration, and the three methods read only ``kv_args`` and the
engine. Nothing of SGLang's is replaced.
"""

from __future__ import annotations

import types
from collections.abc import Sequence
from typing import Any

__all__ = ["kv_args", "load", "manager"]


def load() -> types.SimpleNamespace:
    """The two modules, imported with the GPU-only stand-ins (gpu_stubs) in place."""
    import gpu_stubs

    gpu_stubs.install()
    from sglang.srt.disaggregation.base import conn as base_conn
    from sglang.srt.disaggregation.mooncake import conn
    from sglang.srt.distributed.device_communicators import mooncake_transfer_engine as mte

    return types.SimpleNamespace(conn=conn, mte=mte, KVArgs=base_conn.KVArgs)


def kv_args(sg: types.SimpleNamespace, kv: Sequence[tuple[int, int, int]],
            aux: Sequence[tuple[int, int, int]] = (),
            state: Sequence[Sequence[tuple[int, int, int]]] = (), gpu_id: int = 0) -> Any:
    """A real ``KVArgs`` with the registration fields filled: (ptr, len, item_len) per entry,
    ``state`` a list per state type as SGLang keeps it."""
    args = sg.KVArgs()
    args.kv_data_ptrs = [e[0] for e in kv]
    args.kv_data_lens = [e[1] for e in kv]
    args.kv_item_lens = [e[2] for e in kv]
    args.aux_data_ptrs = [e[0] for e in aux]
    args.aux_data_lens = [e[1] for e in aux]
    args.aux_item_lens = [e[2] for e in aux]
    args.state_data_ptrs = [[e[0] for e in s] for s in state]
    args.state_data_lens = [[e[1] for e in s] for s in state]
    args.state_item_lens = [[e[2] for e in s] for s in state]
    args.gpu_id = gpu_id
    args.ib_device = None
    return args


def manager(sg: types.SimpleNamespace, args: Any) -> Any:
    """A ``MooncakeKVManager`` holding ``args``, its engine taken by its own ``init_engine``
    (the shared engine ``init_mooncake_transfer_engine`` made)."""
    mgr = object.__new__(sg.conn.MooncakeKVManager)
    mgr.kv_args = args
    mgr.init_engine()
    return mgr
