"""The fake's ``v0.3.13`` store profile, learned from the real store and checked against it.

Like the CUDA tier's ``profile_from_report``: :func:`observe` asks the real deployment the
questions each profile field answers (docs/mooncake-verbs.md §7), :func:`learn` turns the
answers into a :class:`~kvreg.fakes.mooncake.StoreProfile`, and :func:`mismatches` names
every field where the fake's profile disagrees. The MR-limit fields need an RDMA NIC and
are not learned here (the profile's ``notes`` say so).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping
from typing import Any

import numpy as np

from kvreg.fakes.mooncake import ErrorCode, StoreProfile

from .mooncake_master import find_master, package_version
from .mooncake_real import RealMooncake, setup_args

__all__ = ["LEARNED_FIELDS", "learn", "master_default_lease_ms", "mismatches", "observe"]

# profile fields a tcp run settles
LEARNED_FIELDS = ("default_kv_lease_ttl_ms", "reads_take_lease", "resetup_replaces_client",
                  "objects_live_in_segments", "duplicate_key_winner", "store_memcpy_tcp")
MiB = 1 << 20


def master_default_lease_ms(binary: str | None = None, timeout: float = 30.0) -> int:
    """``--default_kv_lease_ttl``'s default as ``mooncake_master --help`` prints it."""
    exe = binary or find_master()
    if exe is None:
        raise FileNotFoundError("no mooncake_master binary")
    out = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=timeout,
                         check=False)
    m = re.search(r"-default_kv_lease_ttl .*?default: \"?(\d+)", out.stdout + out.stderr,
                  re.S)
    if m is None:
        raise ValueError("mooncake_master --help does not show default_kv_lease_ttl")
    return int(m.group(1))


def observe(real: RealMooncake) -> dict[str, Any]:
    """The facts, asked of the real store (the master should run with its default lease)."""
    facts: dict[str, Any] = {"version": package_version(),
                             "default_kv_lease_ttl_ms": master_default_lease_ms(
                                 real.master.binary)}
    a = np.arange(8192, dtype=np.uint8)
    b = np.zeros(8192, np.uint8)
    pa, pb = int(a.ctypes.data), int(b.ctypes.data)
    s = real.store()
    # tcp: put/get from unregistered memory work (the store falls back to memcpy)
    facts["store_memcpy_tcp"] = (s.put_from("m", pa, 100) == 0 and
                                 s.get_into("m", pb, 100) == 100)
    facts["reads_take_lease"] = s.remove("m") == int(ErrorCode.OBJECT_HAS_LEASE)
    s.remove("m", True)
    s.batch_put_from(["d", "d"], [pa, pa + 100], [10, 20])
    facts["duplicate_key_winner"] = {20: "last", 10: "first"}.get(int(s.get_size("d")),
                                                                    "neither")
    lone = real.store(global_segment=0)
    s.put_from("seg", pa, 10)
    rc = s.setup(*setup_args(real.master, 64 * MiB, 16 * MiB))
    facts["resetup_replaces_client"] = rc == 0 and s.get_size("seg") == int(
        ErrorCode.OBJECT_NOT_FOUND)
    s.close()
    facts["objects_live_in_segments"] = lone.put_from("x", pa, 10) == int(
        ErrorCode.NO_AVAILABLE_HANDLE)
    lone.close()
    return facts


def learn(base: StoreProfile, facts: Mapping[str, Any]) -> StoreProfile:
    """``base`` with every learned field set from ``facts``."""
    changes = {k: facts[k] for k in LEARNED_FIELDS if k in facts and k != "store_memcpy_tcp"}
    notes = dict(base.notes)
    notes["learned"] = f"from the real store {facts.get('version')} over tcp"
    return base.replace(**changes, notes=notes)


def mismatches(profile: StoreProfile, facts: Mapping[str, Any]) -> list[str]:
    """Every fact the profile contradicts, as 'field: profile X, real store Y'."""
    out = []
    want_version = profile.version.removeprefix("v")
    if facts.get("version") is not None and facts["version"] != want_version:
        out.append(f"version: profile {want_version}, real store {facts['version']}")
    for name in LEARNED_FIELDS:
        if name not in facts:
            continue
        if name == "store_memcpy_tcp":
            # the fake lets tcp move bytes without registration whatever store_memcpy says
            if facts[name] is not True:
                out.append(f"{name}: the fake moves tcp bytes unregistered, real store "
                           f"{facts[name]}")
            continue
        have = getattr(profile, name)
        if have != facts[name]:
            out.append(f"{name}: profile {have!r}, real store {facts[name]!r}")
    return out
