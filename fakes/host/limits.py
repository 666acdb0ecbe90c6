"""What one host is: its memory, limits and the behaviours no source settles ([UNC]).

Sizes are bytes; a host of TiB costs no RAM (nothing is allocated, only counted). Every
field is a fact of docs/host.md; the [UNC] ones are switchable (``HOST_UNC_OPTIONS``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

__all__ = ["HOST_UNC_OPTIONS", "HostLimits"]

# the [UNC] behaviours a scenario may switch, with the values each takes (docs/host.md §5)
HOST_UNC_OPTIONS: dict[str, tuple[Any, ...]] = {
    "pin_exhausted_code": (1, 2),
    "pins_count_memlock": (False, True),
}

_SIZES = ("ram", "other_used", "page_cache", "reserve", "wmark_low", "movable")


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
        for key, allowed in HOST_UNC_OPTIONS.items():
            if getattr(self, key) not in allowed:
                raise ValueError(f"host {key} must be one of "
                                 f"{', '.join(repr(a) for a in allowed)}; got "
                                 f"{getattr(self, key)!r}")
        if self.shared_pin_window_s < 0:
            raise ValueError("host shared_pin_window_s must be >= 0")

    @property
    def shm_size(self) -> int:
        """tmpfs's default size is half of RAM (docs/host.md §2)."""
        return self.ram // 2 if self.shm is None else self.shm

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HostLimits:
        return cls(**data)
