"""``FakeCuda``: one simulated process with a driver, its runtimes, a trace and a fault plan.

This is what tests and the ``fake_cudart`` fixture hold. Under ``fake.patch()``,
``torch.cuda.cudart()`` reaches ``fake.torch``, ``cuda.bindings.runtime`` reaches
``fake.runtime``, ``cuda.bindings.driver`` reaches ``fake.driver_api``, and
``ctypes.CDLL("libcudart.so...")`` reaches ``fake.libcudart_faces(name)``: through the
process's doors (:mod:`kvreg.fakes.doors`), so a handle kept from an earlier patch reaches
the fake patched in now, and patches nest. Every door is
recorded and fault-injected by one :class:`~kvreg.fakes.recorder.Intercepted` layer, sharing
one trace and one plan; each runtime instance (torch's, cuda-bindings', the system
libcudart) keeps its own last-error slot over the one driver (docs/cuda-runtime.md §6), and a
ctypes load is whichever of torch's and the system's the dynamic loader returns for its name
(§6.1). The driver keeps each thread's current context (§13); the thread that patches the fake
in has the primary context current, as a serving engine's main thread has.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..address_space import AddressSpace
from ..doors import PROCESS, enlist, make_stale
from ..faults import FaultPlan, FaultRule
from ..patching import cannot_open, patch_ctypes_cudart, patch_cuda_bindings, patch_torch_cudart
from ..protocol import leak_text
from ..recorder import Intercepted, Trace
from . import errors as E
from .ctypes_face import LIBCUDART_NAME, CtypesCudartFace, FakeCudartLibrary, is_libcudart
from .cuda_driver import FakeDriver
from .cuda_machine import looks_like_cuda
from .cuda_python_face import OUTPUTS, CudaBindingsFace
from .cuda_runtime import FakeRuntime
from .device_memory import GpuMemory
from .driver_face import DRIVER_OUTPUTS, RUNTIME_TWINS, CudaDriverFace
from .pinned_query import patch_is_pinned
from .profile import DeviceProfile
from .torch_face import TorchCudartFace

if TYPE_CHECKING:
    import torch

__all__ = ["FakeCuda", "LiveRegistration"]

# where PyPI CUDA wheels of torch load libcudart from: site-packages/nvidia/cuda_runtime/lib
# (CUDA 12 packages) or site-packages/nvidia/cu<major>/lib (CUDA 13) (docs/cuda-runtime.md §6.1)
_NVIDIA_RUNTIME_DIR = re.compile(r"(?:^|/)nvidia/(?:cuda_runtime|cu\d+)/lib/[^/]+$")


@dataclass(frozen=True)
class LiveRegistration:
    """A registration still pinned, with the buffer it belongs to (for leak reports)."""

    base: int
    size: int
    flags: int
    buffer: str | None
    offset: int | None

    def describe(self) -> str:
        where = f" ({self.buffer} + {self.offset:#x})" if self.buffer is not None else ""
        return f"[{self.base:#x}, {self.base + self.size:#x}) {self.size} bytes{where}"


class FakeCuda:
    """A fake CUDA process: independent of every other instance (no global state)."""

    def __init__(self, profile: str | DeviceProfile | None = None, *,
                 space: AddressSpace | None = None, use_real_types: bool = True) -> None:
        self.driver = FakeDriver(profile, space)
        self.space = self.driver.space
        self.trace = Trace()
        self.trace.describe_ptr = self.space.describe
        self.faults = FaultPlan()
        # two runtime instances over one driver: torch's libcudart and cuda-bindings' (docs/cuda-
        # runtime.md §6)
        self.torch_runtime = FakeRuntime(self.driver, "torch")
        self.cuda_runtime = FakeRuntime(self.driver, "cuda-bindings",
                                        self.profile.bindings_runtime_version)
        self.torch: Any = Intercepted(
            TorchCudartFace(self.torch_runtime), face="torch", trace=self.trace,
            plan=self.faults, resolve=self._resolve,
            on_injected=self.torch_runtime.set_last_error)
        self.runtime: Any = Intercepted(
            CudaBindingsFace(self.cuda_runtime, use_real_types=use_real_types), face="cuda",
            trace=self.trace, plan=self.faults, resolve=self._resolve, outputs=OUTPUTS,
            on_injected=self.cuda_runtime.set_last_error)
        # libcudart loaded through ctypes: torch's instance when the dynamic loader returns
        # torch's loaded object for the name, another one (the system libcudart, its own
        # last-error slot) otherwise (docs/cuda-runtime.md §6.1)
        self.libcudart_runtime = FakeRuntime(self.driver, "libcudart",
                                             self.profile.runtime_version)
        self._ctypes_faces = {
            runtime.name: (CtypesCudartFace(runtime), Intercepted(
                CtypesCudartFace(runtime), face="ctypes", trace=self.trace, plan=self.faults,
                resolve=self._resolve, on_injected=runtime.set_last_error))
            for runtime in (self.libcudart_runtime, self.torch_runtime)}
        # the runtime instances code reached through a ctypes handle: with one, it has
        # cudaGetLastError on that instance (torch's too, docs/cuda-runtime.md §6.1)
        self.ctypes_reached: set[str] = set()
        # the driver API: same registrations, no last-error slot (docs/cuda-runtime.md §6)
        self.driver_api: Any = Intercepted(
            CudaDriverFace(self.driver, use_real_types=use_real_types), face="driver",
            family="cudriver", prefix="cu", trace=self.trace, plan=self.faults,
            resolve=self._resolve, outputs=DRIVER_OUTPUTS, aliases=RUNTIME_TWINS)

    @property
    def profile(self) -> DeviceProfile:
        return self.driver.profile

    # -- memory -------------------------------------------------------------------------------
    def virtual(self, shape: Sequence[int] | int, dtype: Any = "uint8", *,
                name: str = "") -> torch.Tensor:
        """A CPU ``torch.Tensor`` of any size over reserved memory in this process's address
        space (no RAM until touched; ended by ``space.release()``)."""
        return self.space.virtual(shape, dtype, name=name)

    def track(self, obj: Any, *, name: str = "") -> Any:
        """Name a real buffer so traces and leak reports can point into it."""
        self.space.track(obj, name=name)
        return obj

    def _resolve(self, ptr: int) -> tuple[str, int] | None:
        hit = self.space.owner(ptr)
        return None if hit is None else (hit[0].name, hit[1])

    def is_torch_libcudart(self, name: str) -> bool:
        """Whether ``dlopen(name)`` returns the libcudart torch loaded (docs/cuda-runtime.md
        §6.1). glibc's ``_dl_map_object`` first compares the name with each loaded object's
        names and its DT_SONAME, then, after opening a file, its device and inode (elf/dl-load.c)
        [DOC]: so a bare name equal to torch's soname, or a path to torch's very file, is
        torch's instance; any other name or file is another."""
        match = LIBCUDART_NAME.search(name)
        if match is None:
            raise ValueError(f"{name!r} does not name a libcudart shared library")
        mode = self.profile.torch_cudart
        if mode == "bundled":    # torch/lib/libcudart-<hash>.so<.major>, its soname the same
            return match.group("bundled") is not None
        if mode == "private":    # cudart linked into torch: no loaded object is torch's runtime
            return False
        soname = f"libcudart.so.{self.torch_runtime.version // 1000}"
        base = name.rsplit("/", 1)[-1]
        if base != soname:
            return False
        # a path is torch's object only when it is the nvidia-cuda-runtime package's file
        return "/" not in name or _NVIDIA_RUNTIME_DIR.search(name) is not None

    def libcudart_loads(self, name: str) -> bool:
        """Whether ``dlopen(name)`` finds a libcudart at all (docs/cuda-runtime.md §6.3):
        always with a toolkit installed; with PyPI's wheels alone only torch's object (its
        soname, its file), as nothing else named libcudart is on the loader path."""
        return self.profile.libcudart_install == "toolkit" or self.is_torch_libcudart(name)

    def libcudart_faces(self, name: str) -> tuple[Any, CtypesCudartFace]:
        """(recorded face, raw face) of the runtime instance a libcudart name loads: torch's
        where the dynamic loader returns torch's object (:meth:`is_torch_libcudart`), the
        system libcudart's otherwise."""
        runtime = self.torch_runtime if self.is_torch_libcudart(name) else \
            self.libcudart_runtime
        self.ctypes_reached.add(runtime.name)
        raw, face = self._ctypes_faces[runtime.name]
        return face, raw

    def load_libcudart(self, name: str = "libcudart.so") -> FakeCudartLibrary:
        """A libcudart bound to this fake alone (under ``patch()``, ``ctypes.CDLL(name)``
        gives the process's one library for that name, reaching the fake patched in)."""
        if not self.libcudart_loads(name):
            raise OSError(cannot_open(name))
        face, raw = self.libcudart_faces(name)
        return FakeCudartLibrary(name, face, raw)

    @property
    def libcudart_soname(self) -> str:
        """The soname the ld.so cache lists for a toolkit's libcudart:
        ``libcudart.so.<major>``."""
        return f"libcudart.so.{self.profile.runtime_version // 1000}"

    @property
    def found_libcudart(self) -> str | None:
        """What ``ctypes.util.find_library("cudart")`` answers: the toolkit's soname from the
        ld.so cache; None with PyPI's wheels alone (no cache entry, no file on a path that
        gcc or ld search: CPython Lib/ctypes/util.py) [INF]."""
        return self.libcudart_soname if self.profile.libcudart_install == "toolkit" else None

    # -- faults -------------------------------------------------------------------------------
    def inject(self, api: str, *, nth: int | None = None, error: int | str | Any = None,
               **kwargs: Any) -> FaultRule:
        """Arm a fault on ``api`` (``"cudaHostRegister"`` or a full ``"cudart.*"`` point).

        ``fake.inject("cudaHostRegister", nth=2, error=2)`` fails the second call with
        cudaErrorMemoryAllocation, once. Driver-API names (``"cuMemHostRegister"``) arm the
        ``cudriver.*`` points.
        """
        family = "cudart" if api.startswith("cuda") or not api.startswith("cu") else "cudriver"
        point = api if "." in api or api == "*" else f"{family}.{api}"
        if error is None and "raise_" not in kwargs and "delay" not in kwargs:
            error = E.INVALID_VALUE
        return self.faults.arm(point, error=error, nth=nth, **kwargs)

    # -- reports ------------------------------------------------------------------------------
    def gpu_memory(self) -> GpuMemory:
        """This fake's device memory as an RDMA node sees it: ``node.attach_gpu(
        fake.gpu_memory())`` (docs/cuda-runtime.md §14.4)."""
        return GpuMemory(self.driver)

    def live_registrations(self) -> list[LiveRegistration]:
        out = []
        for entry in self.driver.live_registrations():
            hit = self._resolve(entry.base)
            out.append(LiveRegistration(entry.base, entry.size, entry.flags,
                                        hit[0] if hit else None, hit[1] if hit else None))
        return out

    def live(self) -> list[LiveRegistration]:
        """What is still registered (fakes/protocol.py): the live host registrations."""
        return self.live_registrations()

    def leak_report(self) -> str:
        """Empty when nothing leaked; otherwise one line per live registration."""
        return leak_text(self.live(), "host registration(s) still live (never unregistered)")

    # -- activation -----------------------------------------------------------------------------
    @contextmanager
    def patch(self, *, torch: bool = True, cuda_bindings: bool = True,
              cuda_machine: bool = False) -> Iterator[FakeCuda]:
        """For the block, ``torch.cuda.cudart()``, ``cuda.bindings.runtime`` / ``.driver`` and
        libcudart loaded through ctypes reach this fake (other libraries load normally).
        ``cuda_machine=True`` also makes ``torch.version.cuda`` and torch's device queries
        answer as the profile (:mod:`kvreg.fakes.cuda.cuda_machine`)."""
        enlist(self.retire)   # the open retire scope, if any, retires it at its end
        driver = self.driver
        if PROCESS.carry:   # one process: its threads' contexts outlive each fake
            if PROCESS.contexts is None:
                PROCESS.contexts = driver.contexts
            driver.contexts = PROCESS.contexts
        if PROCESS.carry and PROCESS.driver_initialised and self.profile.env == "ok":
            driver.initialised = True   # the process initialised the driver under an earlier fake
        if self.profile.env == "ok" and self.profile.patching_thread_context == "primary":
            # a serving engine's main thread, where torch has used the runtime: the driver is
            # initialised and the primary context current there (docs/cuda-runtime.md §13.3)
            driver.runtime_enter()
        with ExitStack() as stack:
            stack.enter_context(patch_ctypes_cudart(
                self.libcudart_faces, is_cudart=is_libcudart, soname=self.found_libcudart,
                loads=self.libcudart_loads))
            if torch:
                stack.enter_context(patch_torch_cudart(
                    self.torch, env=self.profile.env, device_count=self.profile.device_count))
                stack.enter_context(patch_is_pinned(
                    self.driver.pinned,
                    available=self.profile.env == "ok" and self.profile.device_count > 0))
            if cuda_bindings:
                stack.enter_context(patch_cuda_bindings(
                    self.runtime, legacy=self.profile.bindings_major == 12,
                    driver=self.driver_api))
            if cuda_machine:
                stack.enter_context(looks_like_cuda(self.profile))
            try:
                yield self
            finally:
                if PROCESS.carry and driver.initialised:
                    PROCESS.driver_initialised = True

    def retire(self) -> None:
        """This fake is done with (its scope ended): a call still reaching its faces (a handle
        kept from the fake itself rather than through the doors) is reported, not run."""
        for face in (self.torch, self.runtime, self.driver_api,
                     *(pair[1] for pair in self._ctypes_faces.values())):
            make_stale(face, f"a retired fake CUDA process ({self.profile.name})")
