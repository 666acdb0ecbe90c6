"""Mooncake behaviour profiles: ``released`` (≤ v0.3.12.post1), ``v0.3.13`` and ``head``.

``v0.3.13`` is the version the ``mooncake-real`` tier runs (the PyPI wheel 0.3.13.post1);
its store-level fields are checked against the real store on every CI run
(kvreg.realhw.mooncake_profile, docs/mooncake-verbs.md §7). Released versions (§1.6, §6.1)
reject a ``register_buffer`` above the MR limit with -600 for every protocol and need every
transfer slice inside one registration (a straddling slice fails the transfer with
TRANSFER_FAIL). HEAD splits big registrations into ≤ max_mr_size MRs
itself and splits slices at MR seams, so straddling works. Points the spec marks
[uncertain] or [inferred] are fields with a conservative default.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from ..verbs.enums import ibv_access_flags as F

__all__ = ["ENGINE_BEFORE_V0_3_12", "STORE_PROFILES", "StoreProfile", "get_store_profile"]

TiB = 1 << 40
_ALL_PROTOCOLS = frozenset({"rdma", "tcp", "efa", "cxi"})


@dataclass(frozen=True)
class StoreProfile:
    """What one Mooncake version does with registrations and transfer slices."""

    name: str
    version: str
    description: str
    # §1.6: GlobalConfig::max_mr_size default 0x10000000000 (1 TiB)
    max_mr_size_default: int = TiB
    # §1.6: MC_MAX_MR_SIZE is read from v0.3.11 on (absent in v0.3.10 and earlier)
    reads_mc_max_mr_size: bool = True
    # §1.6: protocols whose register_buffer/local_buffer_size is checked against
    # max_mr_size by the store (released: all; HEAD #3486: efa and cxi only)
    store_limit_protocols: frozenset[str] = _ALL_PROTOCOLS
    # §1.6: HEAD (#2644) auto-splits a registration into <= max_mr_size MRs per device;
    # released versions register one MR per device and, via the TE API only, silently
    # shrink it to max_mr_size while advertising the full length
    te_splits_mrs: bool = False
    # §1.7: HEAD (#3198) splits slices at MR seams; released needs each slice in one buffer
    slices_split_at_mr_seams: bool = False
    # §1.5: access of a store register_buffer. Released: always LOCAL_WRITE|REMOTE_WRITE|
    # REMOTE_READ; HEAD (#3151): LOCAL_WRITE only (no rkey published)
    user_buffer_access: int = int(F.IBV_ACCESS_LOCAL_WRITE | F.IBV_ACCESS_REMOTE_WRITE |
                                  F.IBV_ACCESS_REMOTE_READ)
    # §1.5: RELAXED_ORDERING is added when PCIe RO is on (MC_IB_PCI_RELAXED_ORDERING);
    # the docs say it is on by default at HEAD [doc]
    relaxed_ordering: bool = False
    # §1.7: MC_SLICE_SIZE (default 65536) and the fragment a last slice absorbs (16384)
    slice_size: int = 65536
    fragment_limit: int = 16384
    # [uncertain] §1.7 says the last slice absorbs a tail "of up to" fragment_limit: True
    # reads that as <=, False as <
    tail_absorb_inclusive: bool = True
    # §1.3: the store cuts a user buffer into slices of kMaxSliceSize = 16 MiB - 16 bytes
    max_slice_size: int = (1 << 24) - 16
    # §1.3 [inferred]: with MC_STORE_MEMCPY=1 an unregistered buffer can still "work";
    # conservative default: off (unregistered buffers fail with TRANSFER_FAIL)
    store_memcpy: bool = False
    # §1.3 [verified in an SGLang test comment]: duplicate keys in one batch alias silently.
    # [uncertain] which occurrence wins: "last" (a later map insert overwrites) by default
    duplicate_key_winner: Literal["last", "first"] = "last"
    # Checked against the real store (0.3.13.post1 over tcp, docs/mooncake-verbs.md §7):
    # calls that dereference the store's client before setup()/after close() segfault the
    # process; True makes the fake raise StoreCrash there instead of returning a code
    crashes_without_client: bool = True
    # §7: a read (get_into, get, is_exist, get_size, the batch reads) grants the object a
    # lease of the master's --default_kv_lease_ttl (default 10000 ms); remove() of a leased
    # object returns -706 OBJECT_HAS_LEASE and keeps it, remove_all() skips it (force: no)
    reads_take_lease: bool = True
    default_kv_lease_ttl_ms: int = 10000
    # §7: setup() on a set-up store returns 0 and replaces the client (the old one is torn
    # down: its segment, and the objects in it, are gone)
    resetup_replaces_client: bool = True
    # §7: objects live in the mounted global segments: closing the client whose segment
    # holds them drops them; with no segment mounted anywhere a put fails with -200
    # NO_AVAILABLE_HANDLE (unless the deployment has other nodes, Cluster.external_segments)
    objects_live_in_segments: bool = True
    # §7: a setup_dummy client (backed by a standalone mooncake_client) refuses memory
    # outside the client's shared memory: register_buffer -1, put_from/get_into -600
    dummy_refuses_process_memory: bool = True
    # The transfer engine (mooncake.engine.TransferEngine, docs/mooncake-verbs.md §8.3); all
    # three landed in v0.3.12 (ENGINE_BEFORE_V0_3_12 gives the older behaviour):
    # #2854: a batch registration refuses a zero-length entry (-1) and entries that overlap
    # each other (-7) before registering any; before, both were accepted
    engine_batch_validates: bool = True
    # #2869: a transport's batch (un)registration returns its first per-buffer error and a
    # failed batch is rolled back; before, RDMA logged a warning per failed buffer and the
    # batch returned 0, and a batch unregister naming an unknown address returned 0
    engine_batch_propagates_errors: bool = True
    # #2965: a registration that fails on one transport is undone on those that succeeded,
    # and unregister tries every transport; before, the others kept the buffer published
    engine_rolls_back_transports: bool = True
    # §8.9: how the engine registers device memory: "peermem" (ibv_reg_mr on the device
    # pointer: built with WITH_NVIDIA_PEERMEM, or v0.3.11 on with that env var set) or
    # "dmabuf" (a CUDA build without it: cuMemGetHandleForAddressRange + ibv_reg_dmabuf_mr)
    engine_gpu_registration: str = "peermem"
    # §8.9: what the dma-buf path exports: "range_size" (v0.3.10 and earlier, #2035),
    # "allocation" (v0.3.11 on: cuMemGetAddressRange, #2511) or "covering" (#3538)
    engine_dmabuf_export: str = "allocation"
    # §8.1 (checked on 0.3.13.post1): before initialize() most methods segfault (the engine
    # pointer is null); True makes the fake raise EngineCrash there
    engine_crashes_before_initialize: bool = True
    notes: Mapping[str, str] = field(default_factory=dict)

    def replace(self, **changes: Any) -> StoreProfile:
        """A copy with some fields changed; unknown fields raise TypeError naming them."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise TypeError(f"unknown StoreProfile field(s): {', '.join(sorted(unknown))}")
        return dataclasses.replace(self, **changes)


_PROFILES = [
    StoreProfile(
        "released", "v0.3.12.post1",
        "Released Mooncake (v0.3.11 ... v0.3.12.post1): the store rejects a buffer above the "
        "MR limit with -600; a slice straddling two registrations fails with -800"),
    StoreProfile(
        "v0.3.13", "v0.3.13.post1",
        "Mooncake 0.3.13.post1, the PyPI wheel the mooncake-real tier checks the fake "
        "against (tcp on loopback); MR-limit fields as released [uncertain: not checkable "
        "without an RDMA NIC]",
        notes={"checked": "store codes, leases, re-setup, segments, dummy client: against "
                          "the real store over tcp (tests/mooncake_real)",
               "mr_limit": "store_limit_protocols, te_splits_mrs, slices_split_at_mr_seams "
                           "are the released values, not checked (need an RDMA NIC)"}),
    StoreProfile(
        "head", "3b5a594 (2026-08-22)",
        "Mooncake HEAD: the transfer engine splits big registrations into MRs and splits "
        "slices at MR seams; only efa/cxi keep a store-level limit",
        store_limit_protocols=frozenset({"efa", "cxi"}), te_splits_mrs=True,
        slices_split_at_mr_seams=True, user_buffer_access=int(F.IBV_ACCESS_LOCAL_WRITE),
        relaxed_ordering=True),
]

# the transfer engine of v0.3.11.post1 and earlier (§8.3):
# ``profile.replace(**ENGINE_BEFORE_V0_3_12)``
ENGINE_BEFORE_V0_3_12: Mapping[str, bool] = MappingProxyType({
    "engine_batch_validates": False, "engine_batch_propagates_errors": False,
    "engine_rolls_back_transports": False})

STORE_PROFILES: Mapping[str, StoreProfile] = MappingProxyType({p.name: p for p in _PROFILES})


def get_store_profile(profile: str | StoreProfile | None = None) -> StoreProfile:
    """A profile by name (default ``released``), or the profile given (anything but a name:
    a profile made by this module executed again, as pytester's runs re-import it, is one
    though it is no instance of this execution's class)."""
    if profile is not None and not isinstance(profile, str):
        return profile
    name = profile or "released"
    try:
        return STORE_PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown Mooncake profile {name!r}; known: "
                         f"{', '.join(STORE_PROFILES)}") from None
