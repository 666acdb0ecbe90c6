"""kvreg.fakes: simulated CUDA runtime (and, later, RDMA fabric and Mooncake Store).

``from kvreg.fakes import FakeCuda`` is the usual entry; the names resolve lazily so that
importing the package costs nothing until a fake is built.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PROFILES", "DeviceProfile", "FakeCuda", "FaultPlan", "VirtualTensor"]

_LAZY = {
    "FakeCuda": "kvreg.fakes.fake_cuda",
    "DeviceProfile": "kvreg.fakes.profile",
    "PROFILES": "kvreg.fakes.profile",
    "FaultPlan": "kvreg.fakes.faults",
    "VirtualTensor": "kvreg.fakes.address_space",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'kvreg.fakes' has no attribute {name!r}")
