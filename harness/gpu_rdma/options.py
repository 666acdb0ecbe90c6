"""A ``gpu_rdma`` scenario's own options (the ``gpu_rdma`` table): schema, validation,
defaults, and what a scenario fixes for the process.

Options, all optional (docs/gpu-rdma.md §2):

- ``nics``: NIC name -> NIC profile on each node (default ``{ mlx5_0 = "mlx5" }``); the
  engine is initialized with all of them (one MR per NIC per buffer, docs/mooncake-verbs.md §8.2)
- ``gpu``: the fake GPU's device profile (default ``h200-r580``, fakes/cuda/profile.py)
- ``peermem``: nvidia-peermem loaded (default: the profile's; docs/cuda-runtime.md §14.4)
- ``bar1``: usable BAR1 bytes per GPU (default: the profile's), taken in 64 KiB pages by
  nvidia-peermem MRs and by the dma-buf path's mapped exports (docs/cuda-runtime.md §14.5)
- ``engine``: the Transfer Engine's version: ``v0.3.13`` (default: #2854, #2869, #2965 in) or
  ``v0.3.11`` (before v0.3.12: batch checks, batch errors and transport rollback absent);
  ``batch_validates`` / ``batch_propagates_errors`` / ``rolls_back_transports`` switch one
  each (docs/mooncake-verbs.md §8.3)
- ``gpu_registration``: how the engine registers GPU memory: ``peermem`` (default:
  ``ibv_reg_mr`` on the device pointer) or ``dmabuf`` (a CUDA build without
  nvidia-peermem: ``cuMemGetHandleForAddressRange`` + ``ibv_reg_dmabuf_mr``); ``dmabuf_export``
  what it exports: ``allocation`` (default, v0.3.11 on), ``range_size`` (before #2035) or
  ``covering`` (#3538) (docs/mooncake-verbs.md §8.9)
- ``allocator``: ``cudaMalloc`` (one block per buffer, as SGLang's pools), ``one_block``
  (every KV buffer a view into one cudaMalloc block: interior pointers, Mooncake #2035) or
  ``expandable_segments`` (PyTorch's VMM segments in 20 MiB mappings, Mooncake #2511) or
  ``memory_saver`` (torch_memory_saver's region "kv_cache": a VMM allocation per tensor)
- ``pause_resume``: between register and the transfers, each node's memory saver releases
  the KV cache's device memory and maps new memory at the same addresses, around the
  implementation's optional ``release`` / ``resume`` hooks (default false; needs
  ``allocator = "memory_saver"``; over the engine, its nvidia-peermem path; docs/gpu-rdma.md
  §7)
- ``vmm_gdr``: the expandable segments' memory created ``gpuDirectRDMACapable`` (default
  false) [UNC]
- ``aux`` / ``aux_bytes`` / ``aux_item``: host aux buffers (default 2 of 64 KiB, 64 B items)
- ``state`` / ``state_bytes``: GPU state buffers (default none, 8 MiB each)
- ``transfers``: the transfers step writes pages prefill -> decode (default true)
- ``transport``: what the nodes register with: ``mooncake`` (default: an initialized Transfer
  Engine, the ``mooncake_engine`` style) or ``nixl`` (a NIXL agent with the UCX backend per
  node, the ``nixl`` style; docs/gpu-rdma.md §6). The scenario chooses, since its faults and
  expectations are one transport's; a style of the other transport skips it
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kvreg.fakes.cuda.profile import PROFILES
from kvreg.fakes.mooncake.engine_dmabuf import DMABUF_EXPORTS, GPU_REGISTRATIONS
from kvreg.fakes.mooncake.profiles import ENGINE_BEFORE_V0_3_12, get_store_profile
from kvreg.fakes.verbs.profiles import get_nic_profile
from kvreg.harness.run.target import ProcessConfig

if TYPE_CHECKING:
    from kvreg.fakes.cuda.profile import DeviceProfile
    from kvreg.fakes.mooncake.profiles import StoreProfile
    from kvreg.harness.scenario.format import Scenario

__all__ = ["ALLOCATORS", "ENGINES", "NODES", "TRANSPORTS", "GpuRdmaOptions", "process_config",
           "validate_options"]

ALLOCATORS = ("cudaMalloc", "one_block", "expandable_segments", "memory_saver")
ENGINES = ("v0.3.13", "v0.3.11")
TRANSPORTS = ("mooncake", "nixl")
# the nodes of every scenario, in registration order: prefill writes into decode
NODES = ("prefill", "decode")
# the engine switches a scenario may set one by one -> the StoreProfile field
_SWITCHES = {"batch_validates": "engine_batch_validates",
             "batch_propagates_errors": "engine_batch_propagates_errors",
             "rolls_back_transports": "engine_rolls_back_transports"}
_BOOLS = ("peermem", "vmm_gdr", "transfers", "pause_resume", *_SWITCHES)
_COUNTS = ("aux", "state")
_BYTES = ("bar1", "aux_bytes", "aux_item", "state_bytes")
_CHOICES = {"engine": ENGINES, "allocator": ALLOCATORS, "transport": TRANSPORTS,
            "gpu_registration": GPU_REGISTRATIONS, "dmabuf_export": DMABUF_EXPORTS}
_KNOWN = ("nics", "gpu", *_CHOICES, *_BOOLS, *_COUNTS, *_BYTES)


@dataclass(frozen=True)
class GpuRdmaOptions:
    """A scenario's ``gpu_rdma`` table, with defaults."""

    nics: tuple[tuple[str, str], ...] = (("mlx5_0", "mlx5"),)
    gpu: str = "h200-r580"
    peermem: bool | None = None
    bar1: int | None = None
    engine: str = "v0.3.13"
    batch_validates: bool | None = None
    batch_propagates_errors: bool | None = None
    rolls_back_transports: bool | None = None
    gpu_registration: str = "peermem"
    dmabuf_export: str = "allocation"
    allocator: str = "cudaMalloc"
    vmm_gdr: bool = False
    aux: int = 2
    aux_bytes: int = 64 << 10
    aux_item: int = 64
    state: int = 0
    state_bytes: int = 8 << 20
    transfers: bool = True
    transport: str = "mooncake"
    pause_resume: bool = False

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> GpuRdmaOptions:
        """Options already checked by :func:`validate_options`."""
        kw = dict(options)
        if "nics" in kw:
            kw["nics"] = tuple((str(k), str(v)) for k, v in kw["nics"].items())
        return cls(**kw)

    def device_profile(self) -> DeviceProfile:
        """The GPU's profile with the scenario's peermem and BAR1 (bar1: usable bytes)."""
        prof = PROFILES[self.gpu]
        changes: dict[str, Any] = {}
        if self.peermem is not None:
            changes["peermem"] = self.peermem
        if self.bar1 is not None:
            changes.update(bar1_size=self.bar1, bar1_reserved=0)
        return prof.replace(**changes) if changes else prof

    def engine_profile(self) -> StoreProfile:
        """The Mooncake profile whose engine_* fields are the engine version's."""
        prof = get_store_profile("v0.3.13")
        changes: dict[str, Any] = dict(ENGINE_BEFORE_V0_3_12) if self.engine == "v0.3.11" \
            else {}
        if self.gpu_registration != "peermem":
            changes.update(engine_gpu_registration=self.gpu_registration,
                           engine_dmabuf_export=self.dmabuf_export)
        for key, field_name in _SWITCHES.items():
            value = getattr(self, key)
            if value is not None:
                changes[field_name] = value
        return prof.replace(**changes) if changes else prof


def validate_options(options: Mapping[str, Any]) -> list[str]:
    """Problems with a scenario's ``gpu_rdma`` table (empty when valid)."""
    problems = [f"one of the fields {list(_KNOWN)}, not {k!r}" for k in options
                if k not in _KNOWN]
    problems += _nic_problems(options.get("nics", {"mlx5_0": "mlx5"}))
    gpu = options.get("gpu", "h200-r580")
    if gpu not in PROFILES:
        problems.append(f"gpu = one of {sorted(PROFILES)} (got {gpu!r})")
    for key, allowed in _CHOICES.items():
        if key in options and options[key] not in allowed:
            problems.append(f"{key} = one of {list(allowed)} (got {options[key]!r})")
    problems += _pairing_problems(options)
    if options.get("transport") == "nixl":
        # UCX chooses the NICs and there is no engine version over NIXL (docs/gpu-rdma.md §6)
        problems += [f"{k} applies to transport = 'mooncake' only (UCX chooses the NICs "
                     "under NIXL)" if k == "nics" else
                     f"{k} applies to transport = 'mooncake' only"
                     for k in ("nics", "engine", *_SWITCHES, "gpu_registration",
                               "dmabuf_export") if k in options]
    for key in _BOOLS:
        if key in options and not isinstance(options[key], bool):
            problems.append(f"{key} = true or false (got {options[key]!r})")
    for key in (*_COUNTS, *_BYTES):
        value = options.get(key)
        low = 0 if key in _COUNTS else 1
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)
                                  or value < low):
            what = "a count" if key in _COUNTS else "a byte count"
            problems.append(f"{key} = {what} (got {value!r})")
    return problems


def _pairing_problems(options: Mapping[str, Any]) -> list[str]:
    """Options that need another: ``dmabuf_export`` the dma-buf path; ``pause_resume``
    memory the saver allocated, and a path whose MRs' fate after the release has a source
    (docs/gpu-rdma.md §7)."""
    problems = []
    if "dmabuf_export" in options and options.get("gpu_registration") != "dmabuf":
        problems.append('dmabuf_export needs gpu_registration = "dmabuf"')
    if options.get("pause_resume") is not True:
        return problems
    if options.get("allocator") != "memory_saver":
        problems.append('pause_resume needs allocator = "memory_saver" (only memory '
                        "torch_memory_saver allocated is released)")
    if options.get("gpu_registration") == "dmabuf":
        problems.append("pause_resume is modelled on the nvidia-peermem path only (what a "
                        "dma-buf MR reaches after its memory is released is not settled)")
    return problems


def _nic_problems(nics: Any) -> list[str]:
    if not isinstance(nics, Mapping) or not nics:
        return [f"nics = a table of NIC name -> NIC profile (got {nics!r})"]
    problems = []
    for name, prof in nics.items():
        try:
            get_nic_profile(prof)
        except (ValueError, TypeError, KeyError) as exc:
            problems.append(f"nics.{name} = a NIC profile ({exc})")
    return problems


def process_config(sc: Scenario) -> ProcessConfig:
    """No environment; the machine is the GPU profile, the NICs and the engine version."""
    opts = GpuRdmaOptions.parse(sc.options)
    return ProcessConfig("gpu_rdma", (), (opts.gpu, opts.nics, opts.engine))
