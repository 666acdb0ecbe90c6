"""kvreg.fakes: the simulated CUDA runtime (``cuda/``), RDMA fabric behind the pyverbs API
(``verbs/``) and Mooncake Store (``mooncake/``), with the machinery they share: the address
space (buffers by address; virtual buffers are real torch tensors over reserved memory,
``reserved``), fault plans, the call recorder, patching and the process's mappings.

``from kvreg.fakes import FakeCuda`` is the usual entry; the names resolve lazily so that
importing the package costs nothing until a fake is built.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["PROFILES", "DeviceProfile", "FakeCuda", "FaultPlan"]

_LAZY = {
    "FakeCuda": "kvreg.fakes.cuda.fake_cuda",
    "DeviceProfile": "kvreg.fakes.cuda.profile",
    "PROFILES": "kvreg.fakes.cuda.profile",
    "FaultPlan": "kvreg.fakes.faults",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'kvreg.fakes' has no attribute {name!r}")
