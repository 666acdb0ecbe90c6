"""RDMA backends for the fidelity probes: real pyverbs (``RealVerbs``) and the fake (``FakeVerbs``).

Both expose what the RDMA probes need and nothing more: the pyverbs module tree
(``modules["pyverbs.mr"]`` ...), the device to open, ``track`` (the fake must be told about
real buffers; the real NIC needs no telling) and ``memlock`` (the in-process ``ulimit -l``:
``setrlimit`` on real hardware, the node's simulated limit on the fake). Any device with an
ACTIVE port 1 will do, Soft-RoCE included (docs/mooncake-verbs.md §4.7).

pyverbs is imported on first use only; Debian installs it for the system python, so in a
virtualenv ``RealVerbs()`` raises :class:`~.backend.HardwareUnavailable` with that reason.
"""

from __future__ import annotations

import importlib
import types
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Protocol

from .backend import HardwareUnavailable
from .capabilities import NicInfo, detect_nics
from .memory import temporary_memlock

__all__ = ["MODULES", "FakeVerbs", "RealVerbs", "VerbsBackend", "nic_profile_name"]

# the pyverbs modules the probes use
MODULES = ("pyverbs.device", "pyverbs.pd", "pyverbs.mr", "pyverbs.cq", "pyverbs.qp",
           "pyverbs.wr", "pyverbs.addr", "pyverbs.pyverbs_error")


class VerbsBackend(Protocol):
    """What an RDMA probe holds."""

    device: str

    @property
    def modules(self) -> Mapping[str, Any]: ...

    def track(self, obj: Any, *, name: str = "") -> Any: ...

    def memlock(self, nbytes: int) -> Any: ...

    def describe(self) -> str: ...


def nic_profile_name(device: str) -> str:
    """The fake NIC profile for a real device name (rxe0 -> rxe, mlx5_0 -> mlx5, ...)."""
    for prefix in ("rxe", "mlx5", "erdma", "ionic", "efa"):
        if device.startswith(prefix):
            return prefix
    return "mlx5"


class RealVerbs:
    """The real pyverbs on one device with an ACTIVE port (the first one, unless named)."""

    def __init__(self, device: str | None = None) -> None:
        self._modules: dict[str, types.ModuleType] = {}
        for name in MODULES:
            try:
                self._modules[name] = importlib.import_module(name)
            except ImportError as exc:
                raise HardwareUnavailable(
                    f"pyverbs is not importable ({exc}); install Debian's python3-pyverbs "
                    "and run with the system python") from exc
        _ok, error, nics = detect_nics(self._modules)
        if error is not None:
            raise HardwareUnavailable(f"no RDMA device ({error})")
        chosen = [n for n in nics if n.active and (device is None or n.name == device)]
        if not chosen:
            names = ", ".join(f"{n.name} (port state {n.port_state})" for n in nics) or "none"
            raise HardwareUnavailable(
                f"no RDMA device with an ACTIVE port 1{f' named {device}' if device else ''}"
                f" (devices: {names})")
        self.nic: NicInfo = chosen[0]
        self.device = self.nic.name

    @property
    def modules(self) -> Mapping[str, Any]:
        return self._modules

    def track(self, obj: Any, *, name: str = "") -> Any:
        return obj     # a real NIC registers any mapped address

    def memlock(self, nbytes: int) -> Any:
        return temporary_memlock(nbytes)

    def describe(self) -> str:
        return f"{self.device} (max_mr_size {self.nic.max_mr_size})"


class FakeVerbs:
    """kvreg's fake fabric, one node with one NIC, standing where a real NIC would."""

    def __init__(self, profile: str = "rxe", *, device: str = "rxe0", **attrs: Any) -> None:
        from kvreg.fakes.verbs import Fabric

        self.fabric = Fabric()
        self.node = self.fabric.node()
        self.fabric.add_device(device, profile, **attrs)
        self.device = device
        self.profile = profile

    @classmethod
    def like(cls, nic: NicInfo) -> FakeVerbs:
        """A fake NIC declared like a real one: its driver's profile and its limits."""
        attrs = {k: v for k, v in (("max_mr_size", nic.max_mr_size), ("max_mr", nic.max_mr))
                 if v is not None}
        return cls(nic_profile_name(nic.name), device=nic.name, **attrs)

    @property
    def modules(self) -> Mapping[str, Any]:
        return self.node.modules

    def track(self, obj: Any, *, name: str = "") -> Any:
        return self.node.track(obj, name=name)

    @contextmanager
    def memlock(self, nbytes: int) -> Iterator[int]:
        old = self.node.memlock_limit
        self.node.memlock_limit = nbytes
        try:
            yield nbytes
        finally:
            self.node.memlock_limit = old

    def leak_report(self) -> str:
        return self.fabric.leak_report()

    def describe(self) -> str:
        return f"fake {self.device} (profile {self.profile})"
