"""Device profiles: the driver facts and the unsettled ([UNC]) behaviours, by name.

Every behaviour docs/cuda-runtime.md marks [UNC] is a field here with a documented default,
so a test can pin the choice it relies on and the real-hardware tier can replace the
defaults with what a machine really did (``DeviceProfile.from_dict``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["PROFILES", "UNC_OPTIONS", "DeviceProfile", "get_profile", "profile_with_options"]

GiB = 1 << 30
# docs/cuda-runtime.md §2.2: 2^39 bytes or more -> 2 on R580+ [OBS-ext]
PER_CALL_CEILING_R580 = 512 * GiB

EnvMode = Literal["ok", "no_driver", "no_gpu", "stub"]


@dataclass(frozen=True)
class DeviceProfile:
    """What one machine's driver and device do, as far as registration is concerned."""

    name: str = "h200-r580"
    description: str = "H200 on an R580+ driver (CUDA 13), x86-64 Linux with UVA"
    # environment: "no_driver" -> 35, "no_gpu" -> 100, "stub" -> 34 from every call
    # (docs/cuda-runtime.md §2.2, §11.4)
    env: EnvMode = "ok"
    device_count: int = 1
    device_name: str = "NVIDIA H200"
    # which column of data/device_attributes.tsv answers cudaDeviceGetAttribute ("H200",
    # "H100"); single values can be replaced (None = unsupported -> InvalidValue), e.g. with
    # what the real-hardware tier recorded
    device_model: str = "H200"
    attribute_overrides: dict[int, int | None] = field(default_factory=dict)
    total_memory: int = 143_771_942_912
    driver_version: int = 13000
    # Each runtime instance reports its own version (docs/cuda-runtime.md §6, §9): torch's bundled
    # libcudart and the system libcudart (13.0 -> 13000, docs/cuda-runtime.md §2.2 [OBS-local]) ...
    runtime_version: int = 13000
    # ... and the runtime cuda-bindings links statically: 13050 for cuda-bindings 13.5.0,
    # 13040 for 13.4.4, 12090 for 12.9.x (docs/cuda-runtime.md §6, §9 [OBS-local])
    bindings_runtime_version: int = 13050
    # docs/cuda-runtime.md §2.2: a single call of 512 GiB or more fails with 2 on R580+; None = no
    # ceiling (575-)
    per_call_limit: int | None = PER_CALL_CEILING_R580
    # docs/cuda-runtime.md §2.2 "Address inside CUDA's reserved VA (for example MAP_FIXED at
    # 0xff0000000)" -> 1 [OBS-ext] ucx #8827. The extent of the reservation is [UNC]: the default
    # covers the documented example (8 GiB up to 64 GiB); the real-hardware tier can replace it.
    reserved_va: tuple[tuple[int, int], ...] = ((0x2_0000_0000, 0x10_0000_0000),)
    # docs/cuda-runtime.md §2.1: cudaDevAttrHostRegisterSupported (99)
    host_register_supported: bool = True
    # docs/cuda-runtime.md §2.1: cudaDevAttrHostRegisterReadOnlySupported (113); without it ReadOnly
    # -> 801. The attribute's value per device is not in the spec; the real tier records it.
    read_only_supported: bool = False
    # docs/cuda-runtime.md §2.1 / §4: cudaDevAttrCanUseHostPointerForRegisteredMem (91): alias ==
    # host VA
    can_use_host_pointer_for_registered_mem: bool = True
    # IoMemory flag: the driver doc allows NOT_PERMITTED for unprivileged users
    # (docs/cuda-runtime.md §2.1)
    io_memory_permitted: bool = False
    # [UNC] docs/cuda-runtime.md §2.2 row "byte-disjoint but same 4 KiB page": observed to succeed,
    # so the overlap check is per byte ("byte"); "page" makes it per 4 KiB page (-> 712).
    overlap_granularity: Literal["byte", "page"] = "byte"
    # [UNC] docs/cuda-runtime.md §5.4: a copy spanning two adjacent, separate registrations. The
    # conservative default is to reject it with 1 (docs/cuda-runtime.md §11.3); "allow" treats it as
    # pinned.
    copy_across_registrations: Literal["reject", "allow"] = "reject"
    # [UNC] docs/cuda-runtime.md §2.2: registering memory from cudaHostAlloc "reports an error",
    # probably 712.
    register_host_alloc_code: int = 712
    # [UNC] docs/cuda-runtime.md §3: cudaHostUnregister(NULL) gives InvalidValue or 713.
    unregister_null_code: int = 1
    # [UNC] docs/cuda-runtime.md §4: cudaHostGetFlags on cudaHostRegister'd memory: the registration
    # flags ("flags") or InvalidValue ("invalid", the documented wording).
    host_get_flags_on_registered: Literal["flags", "invalid"] = "invalid"
    # [UNC] docs/cuda-runtime.md §4: for an interior address, hostPointer/devicePointer report the
    # queried address ("queried", the [INF] reading) or the registration base ("base").
    pointer_attributes_interior: Literal["queried", "base"] = "queried"
    # [UNC] docs/cuda-runtime.md §4: the `device` reported for unregistered memory
    # (cudaInvalidDeviceId = -2).
    unregistered_pointer_device: int = -2
    # docs/cuda-runtime.md §5.3: what failIdx holds when the batch error names no copy (SIZE_MAX)
    # [DOC]
    batch_fail_idx_unspecific: int = (1 << 64) - 1
    # docs/cuda-runtime.md §5.3: cudaMemcpyBatchAsync needs a 12.8+ driver (36 below that) [DOC]
    batch_min_driver: int = 12080
    # docs/cuda-runtime.md §9 / §5.3: the cuda-python return arity of cudaMemcpyBatchAsync: 12 ->
    # (err, failIdx)
    bindings_major: int = 13
    # docs/cuda-runtime.md §10 / §2.3: ~0.1 s per GB for prefaulted memory; used only by the
    # optional delay mode
    seconds_per_gib_registered: float = 0.1
    # docs/cuda-runtime.md §6.1: which runtime instance torch's libcudart is, so which names
    # ctypes.CDLL reaches it by. "shared": PyPI CUDA wheels, the nvidia-cuda-runtime package's
    # libcudart.so.<major> loaded at import (soname libcudart.so.<major>) [DOC: torch
    # __init__.py _load_global_deps]; "bundled": older wheels' torch/lib/libcudart-<hash>.so;
    # "private": cudart linked statically (USE_CUDA_STATIC_LINK builds), reachable by no name
    torch_cudart: Literal["shared", "bundled", "private"] = "shared"
    # docs/cuda-runtime.md §6.2: whether anything but the code's own handles reads the last
    # error of a libcudart instance that is not torch's (a name or file the dynamic loader
    # maps apart from torch's object). "unread" (default): torch's kernel-launch checks read
    # torch's instance only, so an error left there is a warning; "read": another component
    # of the process opens the same library and checks its last error, a failure [UNC]
    private_cudart_error: Literal["unread", "read"] = "unread"
    # docs/cuda-runtime.md §6.3: where libcudart files come from, so which names
    # ctypes.CDLL loads at all. "toolkit": a CUDA toolkit's libcudart.so and
    # libcudart.so.<major> on the loader path and in the ld.so cache, every libcudart name
    # loads; "pypi-only": only the nvidia-cuda-runtime wheel torch loaded by path (it ships
    # libcudart.so.<major> alone [OBS-local]), so only a name or file that is torch's loaded
    # object loads, any other raises OSError, and find_library("cudart") answers None [INF]
    libcudart_install: Literal["toolkit", "pypi-only"] = "toolkit"
    # docs/cuda-runtime.md §13: what the thread that patches the fake in has current.
    # "primary": the device's primary context, as on a serving engine's main thread after
    # torch allocated device memory there (the runtime makes it current, §13.2); "none": a
    # bare process (nothing initialised, no context current)
    patching_thread_context: Literal["primary", "none"] = "primary"
    # docs/cuda-runtime.md §13.4: the thread the cuda target calls register and teardown on.
    # "main": the patching thread; "worker": a fresh thread per call, on which nothing made a
    # context current (LMCache PR #5169's heartbeat thread, Mooncake PR #2034)
    register_thread: Literal["main", "worker"] = "main"
    # -- device memory and GPUDirect RDMA (docs/cuda-runtime.md §14) ------------------------
    # §14.1: cudaMalloc / cuMemAlloc bases: at least 256 B aligned [DOC: CUDA C++ Programming
    # Guide, "Device Memory Accesses"]; 2 MiB as large blocks are seen [OBS-ext]
    malloc_alignment: int = 2 << 20
    # §14.2: cuMemGetAllocationGranularity, minimum and recommended: 2 MiB [OBS-ext]
    vmm_granularity: int = 2 << 20
    # §14.3: cuMemGetHandleForAddressRange wants dptr and size aligned to the host page [DOC]
    host_page_size: int = 4096
    # §14.3: CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED (the open kernel modules) [DOC]
    dma_buf_supported: bool = True
    # §14.4: nvidia-peermem loaded, so ibv_reg_mr can pin device memory; without it the
    # kernel falls back to pinning host pages and fails with EFAULT [OBS-ext]
    peermem: bool = True
    # §14.4: BAR1, the window GPUDirect RDMA mappings take (nvidia-smi -q "BAR1 Memory
    # Usage"); the driver keeps some for itself [DOC: GPUDirect RDMA guide]
    bar1_size: int = 256 * GiB
    bar1_reserved: int = 0
    # §14.4 [UNC]: the errno of an ibv_reg_mr past BAR1: EFAULT as reported (ucx #8049,
    # nv_peer_memory #27); ENOMEM as the project's issue 28 states it
    bar1_exhausted_errno: int = 14
    notes: dict[str, str] = field(default_factory=dict)

    def replace(self, **changes: Any) -> DeviceProfile:
        """A copy with some fields changed; unknown fields raise TypeError naming them."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise TypeError(f"unknown DeviceProfile field(s): {', '.join(sorted(unknown))}")
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (lists, string keys); ``from_dict`` reads it back."""
        data = dataclasses.asdict(self)
        data["reserved_va"] = [list(r) for r in self.reserved_va]
        data["attribute_overrides"] = {str(k): v for k, v in self.attribute_overrides.items()}
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DeviceProfile:
        """Build a profile from a dict, e.g. the settled answers of a real-hardware run."""
        data = dict(data)
        if "attribute_overrides" in data:   # JSON turns the int keys into strings
            data["attribute_overrides"] = {int(k): v for k, v in
                                           data["attribute_overrides"].items()}
        if "reserved_va" in data:
            data["reserved_va"] = tuple(tuple(r) for r in data["reserved_va"])
        return cls().replace(**data)


PROFILES: dict[str, DeviceProfile] = {
    "h200-r580": DeviceProfile(),
    "h100-r575": DeviceProfile(
        name="h100-r575",
        description="H100 on an R575 driver (CUDA 12.9): no 512 GiB per-call ceiling",
        device_name="NVIDIA H100 80GB HBM3",
        device_model="H100",
        total_memory=85_029_158_912,
        driver_version=12090,
        runtime_version=12090,
        bindings_runtime_version=12090,
        per_call_limit=None,
        bindings_major=12,
    ),
    "old-driver-12.2": DeviceProfile(
        name="old-driver-12.2",
        description="A 12.8+ runtime on a 12.2 driver: cudaMemcpyBatchAsync gives 36",
        driver_version=12020,
        runtime_version=12090,
        bindings_runtime_version=12090,
        per_call_limit=None,
        bindings_major=12,
    ),
    "t4-small-bar1": DeviceProfile(
        name="t4-small-bar1",
        description="T4 (16 GB) with a 256 MiB BAR1: GPUDirect RDMA MRs past it fail "
                    "(nv_peer_memory #101) [OBS-ext]",
        device_name="Tesla T4",
        total_memory=15_843_721_216,
        bar1_size=256 << 20,
        # [UNC] "fails around 200MB" of 256 MiB (nv_peer_memory #101): the driver's own share
        bar1_reserved=32 << 20,
    ),
    "no-peermem": DeviceProfile(
        name="no-peermem",
        description="H200 without nvidia-peermem: ibv_reg_mr on device memory gives EFAULT "
                    "(perftest #126) [OBS-ext]; dma-buf still works",
        peermem=False,
    ),
    "wsl2": DeviceProfile(
        name="wsl2",
        description="WSL2 GPU-PV: registered memory has a device alias != host VA",
        can_use_host_pointer_for_registered_mem=False,
    ),
    "no-driver": DeviceProfile(
        name="no-driver", description="No NVIDIA driver installed (every call 35)",
        env="no_driver", device_count=0, driver_version=0,
    ),
    "no-gpu": DeviceProfile(
        name="no-gpu", description="Driver present, no GPU visible (100)",
        env="no_gpu", device_count=0,
    ),
}


def get_profile(profile: str | DeviceProfile | None = None) -> DeviceProfile:
    """Resolve a profile by name (ValueError lists the known names)."""
    if profile is None:
        return PROFILES["h200-r580"]
    if isinstance(profile, DeviceProfile):
        return profile
    try:
        return PROFILES[profile]
    except KeyError:
        raise ValueError(
            f"unknown device profile {profile!r}; known: {', '.join(sorted(PROFILES))}"
        ) from None


# The [UNC] behaviours a scenario may switch (``profile_options``), with the values each takes:
# a verdict that rests on one of them names the option and how to flip it.
UNC_OPTIONS: dict[str, tuple[Any, ...]] = {
    "copy_across_registrations": ("reject", "allow"),      # docs/cuda-runtime.md §5.4
    "overlap_granularity": ("byte", "page"),                # §2.2
    "host_get_flags_on_registered": ("flags", "invalid"),   # §4
    "pointer_attributes_interior": ("queried", "base"),     # §4
    "private_cudart_error": ("unread", "read"),             # §6.2
    # not [UNC]: facts of the process a scenario chooses
    "torch_cudart": ("shared", "bundled", "private"),        # §6.1
    "libcudart_install": ("toolkit", "pypi-only"),           # §6.3
    "register_thread": ("main", "worker"),                   # §13.4
    "bar1_exhausted_errno": (14, 12),                        # §14.4: EFAULT, ENOMEM
}


def profile_with_options(profile: str | DeviceProfile | None,
                         options: dict[str, Any] | None = None) -> DeviceProfile:
    """``profile`` with some [UNC] behaviours switched; ValueError names a bad option."""
    base = get_profile(profile)
    for key, value in (options or {}).items():
        allowed = UNC_OPTIONS.get(key)
        if allowed is None:
            raise ValueError(f"unknown [UNC] profile option {key!r}; known: "
                             f"{', '.join(sorted(UNC_OPTIONS))}")
        if value not in allowed:
            raise ValueError(f"profile option {key} must be one of "
                             f"{', '.join(repr(a) for a in allowed)}; got {value!r}")
    return base.replace(**options) if options else base
