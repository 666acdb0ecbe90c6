"""What one host is: its memory, limits and the behaviours no source settles ([UNC]).

Sizes are bytes; a host of TiB costs no RAM (nothing is allocated, only counted). Every
field is a fact of docs/host.md; the [UNC] ones are switchable (``HOST_UNC_OPTIONS``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

__all__ = ["HOST_UNC_OPTIONS", "REFUSAL_ORDERS", "HostLimits"]

# the [UNC] behaviours a scenario may switch, with the values each takes (docs/host.md §5)
HOST_UNC_OPTIONS: dict[str, tuple[Any, ...]] = {
    "pin_exhausted_code": (1, 2),
    "pins_count_memlock": (False, True),
}

_SIZES = ("ram", "other_used", "page_cache", "reserve", "wmark_low", "movable")


REFUSAL_ORDERS = ("arrival", "rank")


def _stale_files(files: Any) -> tuple[tuple[str, int], ...]:
    """``stale_shm`` as (name, size) pairs (a JSON round trip gives lists)."""
    if not isinstance(files, list | tuple):
        raise ValueError(f"host stale_shm must be a list of (name, size); got {files!r}")
    out: list[tuple[str, int]] = []
    for entry in files:
        if not isinstance(entry, list | tuple) or len(entry) != 2:
            raise ValueError(f"host stale_shm entries are (name, size); got {entry!r}")
        name, size = entry
        if (not isinstance(name, str) or not name or "/" in name or name in (".", "..")
                or "\0" in name):
            raise ValueError(f"host stale_shm: a file name in /dev/shm (no '/'); got {name!r}")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise ValueError(f"host stale_shm: {name}'s size must be bytes >= 0; got {size!r}")
        if name in dict(out):
            raise ValueError(f"host stale_shm: {name} is given twice")
        out.append((name, size))
    return tuple(out)


@dataclass(frozen=True)
class HostLimits:
    """One machine's memory as the kernel accounts it (docs/host.md §1-§4)."""

    ram: int                                  # MemTotal
    cgroup_memory_max: int | None = None      # the ranks' cgroup v2 memory.max; None = "max"
    shm: int | None = None                    # /dev/shm's tmpfs size; None = half of RAM
    memlock: int | None = None                # RLIMIT_MEMLOCK of each rank; None = unlimited
    cap_ipc_lock: bool = False                # the ranks hold CAP_IPC_LOCK (root in a default
    #                                           container): no memlock limit applies
    other_used: int = 0                       # anonymous memory of the rest of the host
    page_cache: int = 0                       # reclaimable file cache at the start
    reserve: int = 0                          # totalreserve_pages, in bytes
    wmark_low: int = 0                        # the zones' low watermarks summed, in bytes
    movable: int = 0                          # RAM in ZONE_MOVABLE/CMA: never pinned long-term
    # [UNC] what cudaHostRegister returns when the host cannot pin the pages: 1 (the GUP
    # failure the driver maps to NV_ERR_INVALID_ADDRESS) or 2 (docs/host.md §5)
    pin_exhausted_code: int = 1
    # [UNC] whether cudaHostRegister charges RLIMIT_MEMLOCK (docs/host.md §3)
    pins_count_memlock: bool = False
    # an injectable failure: pins of the same shared pages by several ranks at once fail
    # with 1 (pin_user_pages -ENOMEM after a failed migration, docs/host.md §5); off by default
    concurrent_shared_pin_fails: bool = False
    # how long a shared pin stays in flight, so that real processes can overlap (seconds)
    shared_pin_window_s: float = 0.0
    # which ranks' pins the host refuses when it cannot hold every rank's pool: "arrival"
    # (the real host: whichever pin comes when the memory is gone) or "rank" (kvreg's
    # deterministic order: as if the ranks pinned one after another in rank order, each
    # keeping what it pinned, so the highest ranks are refused; docs/host.md §5)
    refusal_order: str = "arrival"
    # files in /dev/shm before the ranks start, each (name, size): what a crashed earlier
    # run left, its pages written (resident) and never unlinked (docs/host.md §2)
    stale_shm: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        for name in _SIZES:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"host {name} must be a size in bytes (an int >= 0); "
                                 f"got {value!r}")
        for name in ("cgroup_memory_max", "shm", "memlock"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                      or value < 0):
                raise ValueError(f"host {name} must be a size in bytes or None; got {value!r}")
        if self.ram <= 0:
            raise ValueError(f"host ram must be positive; got {self.ram}")
        if self.other_used + self.page_cache + self.reserve + self.movable > self.ram:
            raise ValueError("host other_used + page_cache + reserve + movable exceed its ram")
        for key, allowed in {**HOST_UNC_OPTIONS, "refusal_order": REFUSAL_ORDERS}.items():
            if getattr(self, key) not in allowed:
                raise ValueError(f"host {key} must be one of "
                                 f"{', '.join(repr(a) for a in allowed)}; got "
                                 f"{getattr(self, key)!r}")
        if self.shared_pin_window_s < 0:
            raise ValueError("host shared_pin_window_s must be >= 0")
        object.__setattr__(self, "stale_shm", _stale_files(self.stale_shm))

    @property
    def pin_capacity(self) -> int:
        """Bytes the ranks can pin together: the RAM less what never pins (ZONE_MOVABLE),
        what else uses it and the reserve, within the cgroup's memory.max."""
        pinnable = self.ram - self.movable - self.other_used - self.reserve
        if self.cgroup_memory_max is None:
            return pinnable
        return min(pinnable, self.cgroup_memory_max)

    @property
    def shm_size(self) -> int:
        """tmpfs's default size is half of RAM (docs/host.md §2)."""
        return self.ram // 2 if self.shm is None else self.shm

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HostLimits:
        return cls(**data)
