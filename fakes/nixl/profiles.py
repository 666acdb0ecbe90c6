"""What the fake NIXL agent does where one build or transport differs from another.

Each option is a behaviour the wheel shows one way on this machine and another build or
transport may show differently (docs/nixl.md §6); the default profile takes the choice that
fails code rather than passes it where the real outcome is not settled.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

__all__ = ["PROFILES", "NixlProfile", "get_nixl_profile"]

UCX_PARAMS: dict[str, str] = {}     # getBackendParams(UCX) on 1.5.1 [OBS-local]


@dataclass(frozen=True)
class NixlProfile:
    """``vram``: ``"device"`` checks a VRAM registration against the fake GPU memory (a
    range in no device allocation fails NIXL_ERR_BACKEND, as UCX's CUDA memory detection
    [UNC]); ``"host-ucx"``: UCX built without CUDA refuses every VRAM registration with
    NIXL_ERR_BACKEND [OBS-local: the wheel's UCX here]. ``post_status``: what ``transfer()``
    answers for a transfer the fake completes in the call: "PROC" (then "DONE" when polled)
    or "DONE"; the real agent answers either, by timing [OBS-local: both seen].
    ``stale_remote``: a transfer to remote memory deregistered after its metadata was loaded:
    ``"moves"`` as UCX over shared memory in one process [OBS-local], ``"error"`` (state ERR)
    as an RDMA NIC's remote access error would [UNC]."""

    name: str
    vram: Literal["device", "host-ucx"] = "device"
    post_status: Literal["PROC", "DONE"] = "PROC"
    stale_remote: Literal["moves", "error"] = "error"
    plugins: tuple[str, ...] = ("AZURE_BLOB", "GDS", "GDS_MT", "GPUNETIO", "GUSLI",
                                "INFINIA", "LIBFABRIC", "OBJ", "POSIX", "UCX")

    def replace(self, **changes: Any) -> NixlProfile:
        return replace(self, **changes)


PROFILES: dict[str, NixlProfile] = {
    # a CUDA node: VRAM checked against the fake device memory; stale remote memory fails
    "ucx-cuda": NixlProfile("ucx-cuda"),
    # nixl-cu12 1.5.1 on a machine without a GPU, as the nixl-real tier runs it
    "ucx-host": NixlProfile("ucx-host", vram="host-ucx", stale_remote="moves"),
}


def get_nixl_profile(profile: str | NixlProfile | None) -> NixlProfile:
    if profile is None:
        return PROFILES["ucx-cuda"]
    if isinstance(profile, NixlProfile):
        return profile
    try:
        return PROFILES[profile]
    except KeyError:
        raise ValueError(f"unknown NIXL profile {profile!r}; known: "
                         f"{', '.join(sorted(PROFILES))}") from None
