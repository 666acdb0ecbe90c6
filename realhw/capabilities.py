"""What this machine offers the real-hardware tier, and exactly what is missing when it can't run.

A hardware test that skips must say *why* in terms an operator can act on: "no NVIDIA
driver (35)" and "no GPU visible (100)" need different fixes (docs/cuda-runtime.md §2.2:
cuda-bindings returns 35 from every call without ``libcuda.so``, 100 with a driver and no
visible GPU). :func:`detect` gathers the facts once — versions, the device attributes the
fake's :class:`~kvreg.fakes.cuda.profile.DeviceProfile` mirrors (91, 99, 113), host memory, the
RDMA NICs with their ``max_mr_size`` — and :meth:`Capabilities.missing_reason` turns them
into one sentence. :func:`profile_for` feeds the facts into the fake, so a differential
run compares like with like (it emulates a declared real version).

Everything is imported lazily: this module loads on a machine with no CUDA and no pyverbs.
"""

from __future__ import annotations

import dataclasses
import platform
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Literal

from kvreg.fakes.cuda import errors as E
from kvreg.fakes.cuda.profile import DeviceProfile

from .memory import available_memory, memlock_limit

__all__ = ["ATTRIBUTES", "Capabilities", "NicInfo", "detect", "detect_nics", "profile_for"]

# cudaDeviceAttr values the tier reads (docs/cuda-runtime.md §2.1, §4) -> Capabilities field
ATTRIBUTES: dict[int, str] = {
    91: "can_use_host_pointer_for_registered_mem",
    99: "host_register_supported",
    113: "read_only_supported",
    100: "pageable_memory_uses_host_page_tables",
}
PORT_ACTIVE = 4   # ibv_port_state.IBV_PORT_ACTIVE

Kind = Literal["gpu", "rdma"]


@dataclass(frozen=True)
class NicInfo:
    """One RDMA device as ``ibv_query_device`` / ``ibv_query_port(1)`` describe it."""

    name: str
    max_mr_size: int | None = None
    max_mr: int | None = None
    port_state: int | None = None
    link_layer: int | None = None
    vendor_id: int | None = None
    error: str | None = None

    @property
    def active(self) -> bool:
        return self.port_state == PORT_ACTIVE


@dataclass(frozen=True)
class Capabilities:
    """The facts of one machine; every field is JSON-serialisable (see ``to_dict``)."""

    hostname: str = ""
    arch: str = ""
    kernel: str = ""
    cuda_bindings: str | None = None          # version; None when not importable
    bindings_major: int | None = None
    torch: str | None = None                  # torch version; None when not installed
    torch_cuda: str | None = None             # torch.version.cuda; None on a CPU build
    runtime_version: int | None = None
    driver_version: int | None = None         # 0 without a driver (docs/cuda-runtime.md §2.2)
    driver_release: str | None = None         # e.g. "580.65.06" from /proc/driver/nvidia
    device_count_code: int | None = None      # cudaGetDeviceCount's code: 0, 35, 100, ...
    device_count: int = 0
    device_name: str | None = None
    device_memory: int | None = None
    can_use_host_pointer_for_registered_mem: int | None = None   # attribute 91
    host_register_supported: int | None = None                   # attribute 99
    read_only_supported: int | None = None                       # attribute 113
    pageable_memory_uses_host_page_tables: int | None = None     # attribute 100
    host_memory_available: int = 0
    memlock_soft: int | None = None           # RLIMIT_MEMLOCK; None = unlimited
    memlock_hard: int | None = None
    pyverbs: bool = False                      # importable
    rdma_error: str | None = None              # why the device list could not be read
    nics: tuple[NicInfo, ...] = ()

    # -- verdicts -------------------------------------------------------------------------
    def missing_reason(self, kind: Kind = "gpu") -> str | None:
        """None when ``kind`` can run here; otherwise what is missing, with the code seen."""
        if kind == "rdma":
            return self._rdma_missing()
        if self.cuda_bindings is None:
            return "cuda-bindings is not installed (pip install 'kvreg[cuda]')"
        code = self.device_count_code
        if code == E.INSUFFICIENT_DRIVER:
            return ("no NVIDIA driver (cudaGetDeviceCount returned 35 "
                    "cudaErrorInsufficientDriver)")
        if code == E.NO_DEVICE:
            return "no CUDA GPU visible (cudaGetDeviceCount returned 100 cudaErrorNoDevice)"
        if code == E.STUB_LIBRARY:
            return ("libcuda.so is the toolkit's stub library (cudaGetDeviceCount returned 34 "
                    "cudaErrorStubLibrary)")
        if code is None or code != 0:
            return f"no usable CUDA device (cudaGetDeviceCount returned {code})"
        if self.device_count < 1:
            return "no CUDA GPU visible (cudaGetDeviceCount returned 0 devices)"
        return None

    def _rdma_missing(self) -> str | None:
        if not self.pyverbs:
            return "pyverbs is not importable (install Debian's python3-pyverbs)"
        if self.rdma_error is not None:
            return f"no RDMA device ({self.rdma_error})"
        if not self.nics:
            return "no RDMA device (get_device_list() is empty)"
        if not any(n.active for n in self.nics):
            names = ", ".join(n.name for n in self.nics)
            return f"no RDMA device with an ACTIVE port 1 ({names})"
        return None

    @property
    def active_nic(self) -> NicInfo | None:
        return next((n for n in self.nics if n.active), None)

    def driver_text(self) -> str:
        """"580.65.06 (CUDA 13000)", or "none" where cudaDriverGetVersion gives 0."""
        if not self.driver_version and not self.driver_release:
            return "none"
        version = f"CUDA {self.driver_version}" if self.driver_version else "CUDA ?"
        return f"{self.driver_release} ({version})" if self.driver_release else version

    def describe(self) -> str:
        """One line naming the machine: GPU, driver and host, for report headers."""
        gpu = self.device_name or "no GPU"
        return (f"{gpu} (driver {self.driver_text()}, runtime {self.runtime_version}) on "
                f"{self.hostname} [{self.arch}]")

    # -- serialisation --------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Plain JSON types (``nics`` becomes a list of dicts)."""
        out = dataclasses.asdict(self)
        out["nics"] = list(out["nics"])
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Capabilities:
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["nics"] = tuple(NicInfo(**n) for n in data.get("nics", ()))
        return cls(**values)


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _driver_release() -> str | None:
    """The kernel module's release ("580.65.06"), which cudaDriverGetVersion does not give."""
    for path in ("/sys/module/nvidia/version", "/proc/driver/nvidia/version"):
        try:
            with open(path) as fh:
                text = fh.read()
        except OSError:
            continue
        for word in text.split():
            parts = word.split(".")
            if len(parts) >= 2 and all(p.isdigit() for p in parts):
                return word
    return None


def _cuda_facts(runtime: Any) -> dict[str, Any]:
    """Versions, device count and attributes through a cuda-python-style module."""
    out: dict[str, Any] = {}
    err, value = runtime.cudaRuntimeGetVersion()
    out["runtime_version"] = int(value) if int(err) == 0 and value is not None else None
    err, value = runtime.cudaDriverGetVersion()
    out["driver_version"] = int(value) if int(err) == 0 and value is not None else None
    err, count = runtime.cudaGetDeviceCount()
    out["device_count_code"] = int(err)
    out["device_count"] = int(count) if int(err) == 0 and count else 0
    if out["device_count"] < 1:
        return out
    for attr, name in ATTRIBUTES.items():
        err, value = runtime.cudaDeviceGetAttribute(runtime.cudaDeviceAttr(attr), 0)
        out[name] = int(value) if int(err) == 0 and value is not None else None
    try:   # not modelled by the fake's face: the stand-in simply has no name
        err, props = runtime.cudaGetDeviceProperties(0)
        if int(err) == 0 and props is not None:
            name = props.name
            out["device_name"] = (name.decode(errors="replace").rstrip("\x00")
                                  if isinstance(name, bytes) else str(name))
            out["device_memory"] = int(props.totalGlobalMem)
    except Exception:
        pass
    if out.get("device_memory") is None:
        err, _free, total = runtime.cudaMemGetInfo()
        if int(err) == 0 and total is not None:
            out["device_memory"] = int(total)
    return out


def detect_nics(modules: Mapping[str, Any] | None = None) -> tuple[bool, str | None,
                                                                   tuple[NicInfo, ...]]:
    """(pyverbs importable, why the list failed, NICs) through real or fake pyverbs modules.

    ``modules`` maps ``"pyverbs.device"`` to a module (a fake node's ``modules``); None
    imports the real pyverbs.
    """
    if modules is None:
        try:
            import pyverbs.device as device_mod
        except ImportError:
            return False, None, ()
    else:
        device_mod = modules["pyverbs.device"]
    try:
        devices = device_mod.get_device_list()
    except Exception as exc:   # PyverbsRDMAError without an RDMA stack
        return True, f"{type(exc).__name__}: {exc}", ()
    nics = []
    for dev in devices:
        raw = dev.name
        name = raw.decode() if isinstance(raw, bytes) else str(raw)
        try:
            with device_mod.Context(name=name) as ctx:
                attr = ctx.query_device()
                port = ctx.query_port(1)
                nics.append(NicInfo(name, int(attr.max_mr_size), int(attr.max_mr),
                                    int(port.state), int(port.link_layer),
                                    int(attr.vendor_id)))
        except Exception as exc:
            nics.append(NicInfo(name, error=f"{type(exc).__name__}: {exc}"))
    return True, None, tuple(nics)


def detect(runtime: Any = None, *, verbs_modules: Mapping[str, Any] | None = None,
           rdma: bool = True, torch: bool = True) -> Capabilities:
    """The capabilities of this machine (or of a stand-in runtime, for tests).

    ``runtime`` is a cuda-python-style module; None imports ``cuda.bindings.runtime``.
    ``verbs_modules`` stands in for pyverbs likewise. ``rdma=False`` / ``torch=False``
    skip those lookups.
    """
    soft, hard = memlock_limit()
    facts: dict[str, Any] = {
        "hostname": platform.node(), "arch": platform.machine(), "kernel": platform.release(),
        "host_memory_available": available_memory(), "memlock_soft": soft,
        "memlock_hard": hard, "driver_release": _driver_release(),
    }
    if runtime is None:
        try:
            from cuda.bindings import runtime as real_runtime
        except ImportError:
            real_runtime = None
        runtime = real_runtime
        if runtime is not None:
            facts["cuda_bindings"] = _version("cuda-bindings") or "unknown"
    else:
        facts["cuda_bindings"] = f"stand-in {getattr(runtime, '__name__', type(runtime))}"
    if runtime is not None:
        major = getattr(runtime, "bindings_major", None)
        if major is None and facts.get("cuda_bindings"):
            head = str(facts["cuda_bindings"]).split(".", 1)[0]
            major = int(head) if head.isdigit() else None
        facts["bindings_major"] = major
        facts.update(_cuda_facts(runtime))
    if torch:
        facts["torch"] = _version("torch")
        # importing torch costs seconds; its CUDA build only matters where a GPU is
        if facts["torch"] is not None and facts.get("device_count", 0) > 0:
            try:
                import torch as torch_mod

                facts["torch_cuda"] = torch_mod.version.cuda
            except Exception:
                pass
    if rdma:
        ok, error, nics = detect_nics(verbs_modules)
        facts.update(pyverbs=ok, rdma_error=error, nics=nics)
    return Capabilities(**facts)


_ENV_BY_CODE = {E.INSUFFICIENT_DRIVER: "no_driver", E.NO_DEVICE: "no_gpu",
                E.STUB_LIBRARY: "stub"}


def profile_for(caps: Capabilities, base: DeviceProfile | None = None) -> DeviceProfile:
    """The fake's profile for this machine: its facts, the [UNC] switches left as in ``base``.

    Only what capability detection *measured* replaces ``base``; the unsettled behaviours
    stay at their documented defaults so the probes can tell whether the fake's guesses
    hold (the probes, not this function, settle them).
    """
    base = base or DeviceProfile()
    changes: dict[str, Any] = {"notes": dict(base.notes)}
    if caps.device_count_code is not None:
        changes["env"] = _ENV_BY_CODE.get(caps.device_count_code, base.env)
        changes["device_count"] = caps.device_count
    for name in ("device_name", "driver_version", "bindings_major"):
        value = getattr(caps, name)
        if value is not None:
            changes[name] = value
    if caps.runtime_version is not None:
        # measured through cuda-python: the version of the runtime cuda-bindings links
        # statically (docs/cuda-runtime.md §6), not torch's bundled one
        changes["bindings_runtime_version"] = caps.runtime_version
    if caps.device_memory is not None:
        changes["total_memory"] = caps.device_memory
    for name in ("can_use_host_pointer_for_registered_mem", "host_register_supported",
                 "read_only_supported"):
        value = getattr(caps, name)
        if value is not None:
            changes[name] = bool(value)
    if caps.driver_version and caps.driver_version < 13000 and base.per_call_limit:
        # [INF] the 512 GiB ceiling is an R580+ fact and R580 is the first CUDA 13 driver
        changes["per_call_limit"] = None
        changes["notes"]["per_call_limit"] = ("[INF] driver below CUDA 13 (pre-R580): no "
                                              "512 GiB ceiling assumed")
    if caps.device_name:
        changes["name"] = f"real:{caps.device_name}"
        changes["description"] = f"measured on {caps.describe()}"
    return base.replace(**changes)
