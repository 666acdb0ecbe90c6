"""Stand-ins for the GPU-only modules SGLang imports at module level (test-only).

SGLang 0.5.23's ``pool_host`` chain imports triton, sgl_kernel, flashinfer, deep_gemm and
friends at import time although a CPU host pool never calls them. :func:`install` puts an
importer on ``sys.meta_path`` that answers only those top-level names (and their submodules)
with modules whose every attribute is an inert placeholder: decorating with one hands the
function back, calling one gives another placeholder, and using one as a number, a tensor or a
launch grid fails there, so a test that reaches real GPU code fails instead of passing.
Real modules, where installed, win: the importer only answers names nothing else can find.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Sequence
from typing import Any

__all__ = ["GPU_ONLY", "install", "uninstall"]

# top-level modules that exist only on GPU machines (CUDA/ROCm builds, vendor kernels)
GPU_ONLY = ("triton", "sgl_kernel", "flashinfer", "deep_gemm", "flash_mla", "vllm",
            "cutlass", "cuda_tile", "nvtx", "pynvml", "tilelang", "sgl_diffusion", "aiter",
            "xgrammar", "outlines", "llguidance", "torchao", "quack", "kt_kernel",
            "flash_attn", "flash_attn_interface", "mscclpp", "nixl", "decord", "torch_memory_saver",
            "sgl_fa3", "fa3_fwd", "triton_kernels", "torchvision", "torchaudio", "tvm_ffi")


class _Meta(type):
    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _placeholder(f"{cls.__qualname__}.{name}")

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        # used as a decorator (@triton.jit, @triton.autotune(...)(fn)): hand the function back
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]
        # module-level calls (tl.constexpr(8), decorator factories) give another placeholder;
        # a result used as a number, a tensor or a kernel launch fails at that use
        return cls

    def __getitem__(cls, item: Any) -> Any:
        return cls

    def __or__(cls, other: Any) -> Any:
        return cls

    def __ror__(cls, other: Any) -> Any:
        return cls

    def __bool__(cls) -> bool:
        return False

    def __iter__(cls) -> Any:
        return iter(())

    def __mro_entries__(cls, bases: Any) -> tuple[type, ...]:
        return (object,)


def _placeholder(qualname: str) -> Any:
    return _Meta(qualname.rsplit(".", 1)[-1], (), {"__qualname__": qualname})


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = _placeholder(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, names: Sequence[str]) -> None:
        self.names = frozenset(names)

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname.split(".")[0] not in self.names:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: Any) -> Any:
        module = _StubModule(spec.name)
        module.__path__ = []
        module.__version__ = "0.0.0"
        return module

    def exec_module(self, module: Any) -> None:
        return None


_FINDER: _Finder | None = None


def _settle_torch_without_triton() -> None:
    """Let torch decide "no triton" before the stand-in exists: torch.compile's inductor
    imports triton's classes when ``import triton`` succeeds (torch/_inductor/runtime/
    triton_compat.py) and asserts on their types."""
    import torch._inductor.runtime.triton_compat  # noqa: F401
    from torch.utils import _triton

    _triton.has_triton_package()
    _triton.has_triton()


def install(names: Sequence[str] = GPU_ONLY) -> None:
    """Answer ``names`` not installed here with stand-ins (idempotent)."""
    global _FINDER
    if _FINDER is not None:
        return
    missing = [n for n in names if importlib.util.find_spec(n) is None]
    _settle_torch_without_triton()
    _FINDER = _Finder(missing)
    sys.meta_path.append(_FINDER)


def uninstall() -> None:
    """Remove the importer and the stand-in modules it made."""
    global _FINDER
    if _FINDER is None:
        return
    sys.meta_path.remove(_FINDER)
    for name in [m for m in sys.modules if m.split(".")[0] in _FINDER.names]:
        del sys.modules[name]
    _FINDER = None
