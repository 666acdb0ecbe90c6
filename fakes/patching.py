"""Context managers that make ``torch.cuda.cudart()`` and ``cuda.bindings.runtime`` reach a fake.

They work on a CPU-only torch build (where ``torch.cuda.cudart()`` raises AssertionError)
and without cuda-bindings installed, and restore every attribute and ``sys.modules`` entry
they touched, whatever happens inside. References bound before activation
(``from torch.cuda import cudart``) are the caller's to patch with ``patch_attr``.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from typing import Any

from .cuda.symbols import remember_real

__all__ = ["patch_attr", "patch_ctypes_cudart", "patch_cuda_bindings", "patch_torch_cudart"]

_MISSING = object()


@contextmanager
def patch_attr(obj: Any, name: str, value: Any) -> Iterator[None]:
    """Set ``obj.name = value`` for the block; delete it afterwards if it was absent."""
    old: Any = obj.__dict__.get(name, _MISSING) if hasattr(obj, "__dict__") else \
        getattr(obj, name, _MISSING)
    setattr(obj, name, value)
    try:
        yield
    finally:
        if old is _MISSING:
            with suppress(AttributeError):
                delattr(obj, name)
        else:
            setattr(obj, name, old)


# what a CUDA build of torch raises from torch.cuda.cudart() -> _lazy_init (docs/cuda-runtime.md §7)
_TORCH_INIT_ERRORS = {
    "no_driver": "Found no NVIDIA driver on your system. Please check that you have an NVIDIA "
                 "GPU and installed a driver from http://www.nvidia.com/Download/index.aspx",
    "no_gpu": "No CUDA GPUs are available",
    "stub": "CUDA driver initialization failed, you might not have a CUDA gpu.",
}


@contextmanager
def patch_torch_cudart(face: Any, *, env: str = "ok", device_count: int = 1) -> Iterator[bool]:
    """``torch.cuda.cudart()`` returns ``face``; yields False when torch is not installed.

    The fake stands for a CUDA build of torch on the profile's machine: with no driver or no
    GPU, ``cudart()`` raises torch's RuntimeError, and ``is_available()`` /
    ``device_count()`` answer for that machine.
    """
    try:
        import torch
        import torch.cuda
    except ImportError:
        yield False
        return

    def cudart() -> Any:
        if env in _TORCH_INIT_ERRORS:
            raise RuntimeError(_TORCH_INIT_ERRORS[env])
        return face

    with ExitStack() as stack:
        stack.enter_context(patch_attr(torch.cuda, "cudart", cudart))
        stack.enter_context(patch_attr(torch.cuda, "is_available",
                                       lambda: env == "ok" and device_count > 0))
        stack.enter_context(patch_attr(torch.cuda, "device_count",
                                       lambda: device_count if env == "ok" else 0))
        # torch.cuda.check_error / CudaError read the module global _cudart
        stack.enter_context(patch_attr(torch.cuda, "_cudart", face))
        yield True


@contextmanager
def _sys_module(name: str, module: Any) -> Iterator[None]:
    old: Any = sys.modules.get(name, _MISSING)
    sys.modules[name] = module
    try:
        yield
    finally:
        if old is _MISSING:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = old


@contextmanager
def patch_cuda_bindings(face: Any, *, legacy: bool = False,
                        driver: Any = None) -> Iterator[None]:
    """``from cuda.bindings import runtime`` (and ``import cuda.bindings.runtime``) gives ``face``.

    ``driver`` (a driver-API face) also takes ``cuda.bindings.driver``'s place. Without
    cuda-bindings installed, stand-in ``cuda`` and ``cuda.bindings`` packages are put
    in ``sys.modules`` for the block. ``legacy=True`` also maps the 12.x ``cuda.cudart`` path.
    """
    remember_real("runtime")   # resolved before the fake takes its place
    remember_real("driver")
    with ExitStack() as stack:
        cuda_pkg: Any
        bindings_pkg: Any
        try:
            import cuda.bindings

            bindings_pkg = cuda.bindings
            cuda_pkg = sys.modules["cuda"]
        except ImportError:
            cuda_pkg = types.ModuleType("cuda")
            cuda_pkg.__path__ = []
            bindings_pkg = types.ModuleType("cuda.bindings")
            bindings_pkg.__path__ = []
            stack.enter_context(_sys_module("cuda", cuda_pkg))
            stack.enter_context(_sys_module("cuda.bindings", bindings_pkg))
            stack.enter_context(patch_attr(cuda_pkg, "bindings", bindings_pkg))
        stack.enter_context(_sys_module("cuda.bindings.runtime", face))
        stack.enter_context(patch_attr(bindings_pkg, "runtime", face))
        # ``from cuda.bindings import driver`` (docs/cuda-runtime.md §6 workaround)
        if driver is not None:
            stack.enter_context(_sys_module("cuda.bindings.driver", driver))
            stack.enter_context(patch_attr(bindings_pkg, "driver", driver))
        if legacy:
            stack.enter_context(_sys_module("cuda.cudart", face))
            stack.enter_context(patch_attr(cuda_pkg, "cudart", face))
        yield


@contextmanager
def patch_ctypes_cudart(load: Any, *, is_cudart: Any, soname: str) -> Iterator[None]:
    """Loading libcudart through ctypes gives ``load(name)``; other libraries load normally.

    Covers ``ctypes.CDLL(name)``, ``ctypes.cdll.LoadLibrary(name)`` (and
    ``ctypes.cdll.<name>``), and ``ctypes.util.find_library("cudart")``, which answers
    ``soname``. A ``CDLL`` bound before activation is the caller's to patch.
    """
    import ctypes
    import ctypes.util

    original_cdll = ctypes.CDLL
    original_find = ctypes.util.find_library

    class SameClassChecks(type):
        def __instancecheck__(cls, obj: Any) -> bool:
            return isinstance(obj, original_cdll)   # isinstance(lib, ctypes.CDLL) still holds

    class PatchedCDLL(original_cdll, metaclass=SameClassChecks):  # type: ignore[valid-type, misc]
        """``ctypes.CDLL`` that hands libcudart loads to the fake."""

        def __new__(cls, name: Any, *args: Any, **kwargs: Any) -> Any:
            if is_cudart(name):
                return load(name)
            return super().__new__(cls)

    def find_library(name: str) -> str | None:
        if name in ("cudart", "libcudart"):
            return soname
        return original_find(name)

    with ExitStack() as stack:
        stack.enter_context(patch_attr(ctypes, "CDLL", PatchedCDLL))
        stack.enter_context(patch_attr(ctypes.cdll, "_dlltype", PatchedCDLL))
        stack.enter_context(patch_attr(ctypes.util, "find_library", find_library))
        yield
