"""kvreg.fakes: the simulated CUDA runtime (``cuda/``), RDMA fabric behind the pyverbs API
(``verbs/``) and Mooncake Store (``mooncake/``), with the machinery they share: the address
space (buffers by address; virtual buffers are real torch tensors over reserved memory,
``reserved``), fault plans, the call recorder, patching and the process's mappings.

``from kvreg.fakes import FakeCuda`` is the usual entry; the names resolve lazily so that
importing the package costs nothing until a fake is built. The CUDA fake's modules live in
``kvreg.fakes.cuda``; their earlier paths (``kvreg.fakes.profile``, ``kvreg.fakes.errors``,
...) still import, as the same module objects, so code written against them keeps working.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from types import ModuleType
from typing import Any

__all__ = ["PROFILES", "DeviceProfile", "FakeCuda", "FaultPlan"]

_LAZY = {
    "FakeCuda": "kvreg.fakes.cuda.fake_cuda",
    "DeviceProfile": "kvreg.fakes.cuda.profile",
    "PROFILES": "kvreg.fakes.cuda.profile",
    "FaultPlan": "kvreg.fakes.faults",
}

# the CUDA fake's modules, importable under the paths they had before fakes/cuda/ held them
_MOVED = frozenset({
    "copies", "coverage", "ctypes_face", "cuda_driver", "cuda_python_face", "cuda_runtime",
    "device_attributes", "driver_face", "errors", "fake_cuda", "host_mapping", "profile",
    "registry", "sorted_bases", "symbols", "torch_face",
})


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``import kvreg.fakes.profile`` gives ``kvreg.fakes.cuda.profile`` itself (one module
    object under both names, so patches and isinstance checks agree)."""

    def find_spec(self, fullname: str, path: Any = None,
                  target: Any = None) -> importlib.machinery.ModuleSpec | None:
        prefix, _, leaf = fullname.rpartition(".")
        if prefix != __name__ or leaf not in _MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(f"{__name__}.cuda.{spec.name.rpartition('.')[2]}")

    def exec_module(self, module: ModuleType) -> None:
        """The module was executed under its own name already."""


if not any(isinstance(f, _MovedModules) for f in sys.meta_path):
    sys.meta_path.append(_MovedModules())


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    if name in _MOVED:
        return importlib.import_module(f"{__name__}.cuda.{name}")
    raise AttributeError(f"module 'kvreg.fakes' has no attribute {name!r}")
