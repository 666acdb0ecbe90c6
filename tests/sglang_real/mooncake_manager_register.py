"""SGLang 0.5.23's Mooncake KV manager registration as a ``gpu_rdma`` implementation
(``mooncake_engine`` style).

``kvreg run scenarios/gpu_rdma --style mooncake_engine --impl
tests/sglang_real/mooncake_manager_register.py:register --teardown ...:teardown`` runs the
wheel's ``MooncakeKVManager.register_buffer_to_engine`` / ``deregister_buffer_to_engine``
and its ``MooncakeTransferEngine.batch_register`` / ``batch_deregister`` as they ship
(docs/real-code-trials.md §8). What the adapter does around them, nothing more:

- the engine kvreg hands in becomes the shared engine's ``engine`` (SGLang's wrapper is made
  without its constructor, which would build and initialize an engine of its own; the two
  batch methods read only ``self.engine``), published in SGLang's process-wide slot for
  the manager's own ``init_engine`` to take;
- ``buffers`` becomes a real ``KVArgs``: the KV and aux lists as given, the state lists as
  SGLang keeps them (one list per state type: the target's one flat list is one type);
- ``handle`` is the manager; teardown is its ``deregister_buffer_to_engine``;
- around a memory saver's pause (``pause_resume``, docs/gpu-rdma.md §7) ``release`` and
  ``resume`` make the manager's calls the wheel's ``release_memory_occupation`` /
  ``resume_memory_occupation`` of its disaggregation queues make (``PrefillBootstrapQueue``
  and ``DecodePreallocQueue``: ``deregister_buffer_to_engine`` before the KV cache is paused,
  ``register_buffer_to_engine`` after it is resumed; the queues' other work, clearing their
  requests, is not registration).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sglang_mooncake
import torch

# the platform probe SGLang runs at import asks torch.cuda.get_device_name() when the fake
# says CUDA is available (see real_register.py): import-time machinery, answered as CPU torch
_fake_is_available = torch.cuda.is_available
torch.cuda.is_available = lambda: False
try:
    _SG = sglang_mooncake.load()
finally:
    torch.cuda.is_available = _fake_is_available

__all__ = ["register", "release", "resume", "teardown"]


def register(engine: Any, buffers: Any) -> Any:
    wrapper = object.__new__(_SG.mte.MooncakeTransferEngine)
    wrapper.engine = engine
    state = [list(zip(buffers.state_data_ptrs, buffers.state_data_lens,
                      buffers.state_item_lens, strict=True))] if buffers.state_data_ptrs else []
    args = sglang_mooncake.kv_args(
        _SG, list(zip(buffers.kv_data_ptrs, buffers.kv_data_lens, buffers.kv_item_lens,
                      strict=True)),
        list(zip(buffers.aux_data_ptrs, buffers.aux_data_lens, buffers.aux_item_lens,
                 strict=True)), state, gpu_id=buffers.gpu_id)
    slot = _SG.mte._mooncake_transfer_engine
    _SG.mte._mooncake_transfer_engine = wrapper
    try:
        mgr = sglang_mooncake.manager(_SG, args)
    finally:
        _SG.mte._mooncake_transfer_engine = slot
    mgr.register_buffer_to_engine()
    return mgr


def teardown(engine: Any, handle: Any) -> None:
    handle.deregister_buffer_to_engine()


def release(engine: Any, handle: Any) -> None:
    handle.deregister_buffer_to_engine()


def resume(engine: Any, buffers: Any, handle: Any) -> Any:
    handle.register_buffer_to_engine()
    return handle
