"""kvreg.fakes.mooncake: a fake Mooncake Store on the fake RDMA fabric (docs/mooncake-verbs.md §1).

``FakeMooncake(profile)`` — ``"released"`` (≤ v0.3.12.post1) or ``"head"`` — builds
``MooncakeDistributedStore`` objects whose methods return what the real binding returns
(negative ``ErrorCode`` ints, never exceptions), whose ``register_buffer`` makes MRs on the
node's fake NICs, and whose put/get move the bytes of registered process memory in place
(numpy arrays, bytearrays, torch CPU tensors; no tracking call needed). Fault
points: ``mooncake.setup``, ``mooncake.register_buffer``, ``mooncake.unregister_buffer``,
``mooncake.put`` and ``mooncake.get`` (checked once per key), ``mooncake.is_exist``,
``mooncake.remove``.

The same deployment gives the transfer engine, ``mooncake.engine.TransferEngine``
(``fake.engine()``; patched in with the store): registrations, tcp/RDMA transfers between
engines and the return codes of the real binding (docs/mooncake-verbs.md §8); fault points
``mooncake.engine.<method>``.
"""

from __future__ import annotations

from .config import MooncakeHostMemAllocator, ReplicateConfig
from .engine import TransferEngine, TransferNotify, TransferOpcode
from .errors import EngineCrash, ErrorCode, StoreCrash, TeError
from .fake import Cluster, FakeMooncake, LiveBuffer
from .profiles import ENGINE_BEFORE_V0_3_12, STORE_PROFILES, StoreProfile, get_store_profile
from .store import MooncakeDistributedStore
from .transfer_engine import FakeTransferEngine, store_slices, te_slices

__all__ = ["ENGINE_BEFORE_V0_3_12", "STORE_PROFILES", "Cluster", "EngineCrash", "ErrorCode",
           "FakeMooncake", "FakeTransferEngine", "LiveBuffer", "MooncakeDistributedStore",
           "MooncakeHostMemAllocator", "ReplicateConfig", "StoreCrash", "StoreProfile", "TeError",
           "TransferEngine", "TransferNotify", "TransferOpcode", "get_store_profile",
           "store_slices", "te_slices"]
