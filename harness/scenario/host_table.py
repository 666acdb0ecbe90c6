"""A many-rank scenario's ``[host]`` table: the machine its ranks share, as the fake host
(fakes/host/limits.py ``HostLimits``, docs/host.md) takes it.

Sizes are bytes or strings such as ``"2TiB"`` (binary units); ``cgroup_memory_max`` and
``memlock`` also take ``"max"`` / ``"unlimited"`` (no limit, the kernel's own words). The
other keys are the fake host's own option names, so a scenario switches its [UNC]
behaviours and injectable failures by the names docs/host.md gives them; ``stale_shm`` lists
the files a crashed earlier run left in ``/dev/shm`` (``{ name, size }`` tables).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from typing import Any

from kvreg.fakes.host.limits import HostLimits

__all__ = ["DEFAULT_RAM", "HOST_KEYS", "SIZE_KEYS", "host_limits", "parse_host", "parse_size"]

TiB = 1 << 40
# an 8-GPU H200 machine's RAM, the host of a scenario whose table gives none
DEFAULT_RAM = 2 * TiB
_UNITS = {"b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
          "pib": 1 << 50}
# the sizes; those that may be unlimited ("max")
SIZE_KEYS = ("ram", "cgroup_memory_max", "shm", "memlock", "other_used", "page_cache",
             "reserve", "wmark_low", "movable")
_UNLIMITED = ("cgroup_memory_max", "memlock", "shm")
HOST_KEYS = tuple(f.name for f in dataclasses.fields(HostLimits))


def parse_size(value: Any) -> int:
    """Bytes from an int or ``"<number><unit>"`` (B, KiB, MiB, GiB, TiB, PiB)."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]+)\s*", value) \
        if isinstance(value, str) else None
    if m is None or m.group(2).lower() not in _UNITS:
        raise ValueError(f'a size in bytes or such as "2TiB" (B, KiB, MiB, GiB, TiB, PiB); '
                         f"got {value!r}")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def parse_host(table: Mapping[str, Any]) -> dict[str, Any]:
    """The table as HostLimits' keyword arguments (ValueError: one line naming the key)."""
    out: dict[str, Any] = {"ram": DEFAULT_RAM}
    for key, value in table.items():
        if key not in HOST_KEYS:
            raise ValueError(f"host.{key}: not a host option (one of {', '.join(HOST_KEYS)})")
        if key in SIZE_KEYS:
            if key in _UNLIMITED and value in ("max", "unlimited"):
                out[key] = None
                continue
            try:
                out[key] = parse_size(value)
            except ValueError as exc:
                raise ValueError(f"host.{key}: {exc}") from None
        elif key == "stale_shm":
            out[key] = _stale_shm(value)
        else:
            out[key] = value
    host_limits(out)
    return out


def _stale_shm(value: Any) -> tuple[tuple[str, int], ...]:
    """``stale_shm = [{ name = "...", size = "512GiB" }, ...]`` as (name, bytes) pairs."""
    want = 'a list of { name = "<file in /dev/shm>", size = "<size>" }'
    if not isinstance(value, list):
        raise ValueError(f"host.stale_shm: {want}; got {value!r}")
    out = []
    for entry in value:
        if not isinstance(entry, Mapping) or set(entry) != {"name", "size"}:
            raise ValueError(f"host.stale_shm: {want}; got {entry!r}")
        try:
            out.append((entry["name"], parse_size(entry["size"])))
        except ValueError as exc:
            raise ValueError(f"host.stale_shm: {entry.get('name')!r}: {exc}") from None
    return tuple(out)


def host_limits(kwargs: Mapping[str, Any]) -> HostLimits:
    """The fake host's limits (ValueError naming what is wrong)."""
    try:
        return HostLimits(**kwargs)
    except (TypeError, ValueError) as exc:
        raise ValueError(str(exc)) from None
