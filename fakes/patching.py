"""Context managers that make ``torch.cuda.cudart()``, ``cuda.bindings`` and ctypes' libcudart
reach a fake.

Each installs a stable per-process door (:mod:`.doors`) and pushes its fake on the door's
stack: whatever code under test keeps across calls (the module ``torch.cuda.cudart()``
returned, a ``ctypes.CDLL`` of libcudart and its function pointers, ``from
cuda.bindings.runtime import cudaHostRegister`` bound at import) reaches the innermost fake
patched in at the time of the call; nesting one fake's ``patch()`` inside another's works,
the inner one answering while it is patched in. They work on a CPU-only torch build (where
``torch.cuda.cudart()`` raises AssertionError) and without cuda-bindings installed, and
restore every attribute and ``sys.modules`` entry they touched, whatever happens inside.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from typing import Any

from .cuda.symbols import remember_real
from .doors import Door, FacadeModule

__all__ = ["CTYPES_DOOR", "DRIVER_DOOR", "RUNTIME_DOOR", "TORCH_DOOR", "cannot_open",
           "patch_attr", "patch_ctypes_cudart", "patch_cuda_bindings", "patch_torch_cudart",
           "torch_cudart_facade"]

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

TORCH_DOOR = Door("the module torch.cuda.cudart() returns")
_TORCH_FACADE = FacadeModule("torch._C._cudart", TORCH_DOOR)


def torch_cudart_facade() -> Any:
    """The one object ``torch.cuda.cudart()`` returns under every fake of this process."""
    return _TORCH_FACADE


def _cudart() -> Any:
    env = TORCH_DOOR.top_info()["env"]
    if env in _TORCH_INIT_ERRORS:
        raise RuntimeError(_TORCH_INIT_ERRORS[env])
    return _TORCH_FACADE


def _is_available() -> bool:
    info = TORCH_DOOR.top_info()
    return bool(info["env"] == "ok" and info["device_count"] > 0)


def _device_count() -> int:
    info = TORCH_DOOR.top_info()
    return int(info["device_count"]) if info["env"] == "ok" else 0


@contextmanager
def patch_torch_cudart(face: Any, *, env: str = "ok", device_count: int = 1) -> Iterator[bool]:
    """``torch.cuda.cudart()`` reaches ``face``; yields False when torch is not installed.

    The fake stands for a CUDA build of torch on the profile's machine: with no driver or no
    GPU, ``cudart()`` raises torch's RuntimeError, and ``is_available()`` /
    ``device_count()`` answer for that machine. What ``cudart()`` returns is the process's
    one torch door (:func:`torch_cudart_facade`), which forwards to ``face`` for the block.
    """
    try:
        import torch
        import torch.cuda
    except ImportError:
        yield False
        return

    with ExitStack() as stack:
        stack.enter_context(TORCH_DOOR.entered(face, env=env, device_count=device_count))
        stack.enter_context(patch_attr(torch.cuda, "cudart", _cudart))
        stack.enter_context(patch_attr(torch.cuda, "is_available", _is_available))
        stack.enter_context(patch_attr(torch.cuda, "device_count", _device_count))
        # torch.cuda.check_error / CudaError read the module global _cudart
        stack.enter_context(patch_attr(torch.cuda, "_cudart", _TORCH_FACADE))
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


RUNTIME_DOOR = Door("cuda.bindings.runtime")
DRIVER_DOOR = Door("cuda.bindings.driver")
_RUNTIME_FACADE = FacadeModule("cuda.bindings.runtime", RUNTIME_DOOR)
_DRIVER_FACADE = FacadeModule("cuda.bindings.driver", DRIVER_DOOR)


@contextmanager
def patch_cuda_bindings(face: Any, *, legacy: bool = False,
                        driver: Any = None) -> Iterator[None]:
    """``from cuda.bindings import runtime`` (and ``import cuda.bindings.runtime``) reaches
    ``face``.

    ``driver`` (a driver-API face) also answers for ``cuda.bindings.driver``. Without
    cuda-bindings installed, stand-in ``cuda`` and ``cuda.bindings`` packages are put
    in ``sys.modules`` for the block. ``legacy=True`` also maps the 12.x ``cuda.cudart`` path.
    The modules put in place are the process's doors, forwarding to ``face`` / ``driver``.
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
        stack.enter_context(RUNTIME_DOOR.entered(face))
        stack.enter_context(_sys_module("cuda.bindings.runtime", _RUNTIME_FACADE))
        stack.enter_context(patch_attr(bindings_pkg, "runtime", _RUNTIME_FACADE))
        # ``from cuda.bindings import driver`` (docs/cuda-runtime.md §6 workaround)
        if driver is not None:
            stack.enter_context(DRIVER_DOOR.entered(driver))
            stack.enter_context(_sys_module("cuda.bindings.driver", _DRIVER_FACADE))
            stack.enter_context(patch_attr(bindings_pkg, "driver", _DRIVER_FACADE))
        if legacy:
            stack.enter_context(_sys_module("cuda.cudart", _RUNTIME_FACADE))
            stack.enter_context(patch_attr(cuda_pkg, "cudart", _RUNTIME_FACADE))
        yield


# -- ctypes ----------------------------------------------------------------------------------
CTYPES_DOOR = Door("libcudart loaded through ctypes")
_REAL_CDLL = ctypes.CDLL
_REAL_FIND = ctypes.util.find_library
_FACADE_LIBS: dict[str, Any] = {}


class _SameClassChecks(type):
    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, _REAL_CDLL)   # isinstance(lib, ctypes.CDLL) still holds


class _PatchedCDLL(_REAL_CDLL, metaclass=_SameClassChecks):
    """``ctypes.CDLL`` that hands libcudart loads to the fake patched in now.

    One class per process (not one per patch), so patching inside a patch nests instead of
    deriving a CDLL from an already patched one, and ``from ctypes import CDLL`` bound
    under one fake still loads through whichever is patched in later.
    """

    def __new__(cls, name: Any, *args: Any, **kwargs: Any) -> Any:
        door = CTYPES_DOOR
        if door.stack and door.info[-1]["is_cudart"](name):
            if not door.info[-1]["loads"](str(name)):
                raise OSError(cannot_open(str(name)))
            return _facade_lib(str(name))
        return super().__new__(cls)


def cannot_open(name: str) -> str:
    """dlopen's message (what ``ctypes.CDLL`` raises as OSError) for a name no directory
    of the loader's search holds: glibc's "cannot open shared object file" and strerror
    (ENOENT) [OBS-local], docs/cuda-runtime.md §6.3."""
    return f"{name}: cannot open shared object file: No such file or directory"


def _facade_lib(name: str) -> Any:
    """The process's one library object for ``name``: its function pointers (and the
    ``argtypes`` code sets on them) stay, each call reaching the current fake's runtime."""
    lib = _FACADE_LIBS.get(name)
    if lib is None:
        from .cuda.ctypes_face import FakeCudartLibrary

        holder: list[Any] = []

        def faces() -> Any:
            return CTYPES_DOOR.current(holder[0] if holder else None)(name)

        lib = FakeCudartLibrary(name, resolve=faces)
        holder.append(lib)
        _FACADE_LIBS[name] = lib
    return lib


def _find_library(name: str) -> str | None:
    if name in ("cudart", "libcudart") and CTYPES_DOOR.stack:
        soname: str | None = CTYPES_DOOR.info[-1]["soname"]
        return soname
    return _REAL_FIND(name)


def _always(name: str) -> bool:
    return True


@contextmanager
def patch_ctypes_cudart(faces: Callable[[str], Any], *, is_cudart: Any,
                        soname: str | None,
                        loads: Callable[[str], bool] = _always) -> Iterator[None]:
    """Loading libcudart through ctypes reaches ``faces(name)`` (the recorded face and the raw
    one of the runtime that library name stands for); other libraries load normally.

    Covers ``ctypes.CDLL(name)``, ``ctypes.cdll.LoadLibrary(name)`` (and
    ``ctypes.cdll.<name>``), and ``ctypes.util.find_library("cudart")``, which answers
    ``soname``. A libcudart name that ``loads`` refuses raises OSError as dlopen's does. A
    ``CDLL`` class bound before the first patch of the process is the caller's to patch.
    """
    with ExitStack() as stack:
        stack.enter_context(CTYPES_DOOR.entered(faces, is_cudart=is_cudart, soname=soname,
                                                loads=loads))
        stack.enter_context(patch_attr(ctypes, "CDLL", _PatchedCDLL))
        stack.enter_context(patch_attr(ctypes.cdll, "_dlltype", _PatchedCDLL))
        stack.enter_context(patch_attr(ctypes.util, "find_library", _find_library))
        yield
