"""``RealCuda``: the real CUDA runtimes behind the same surface as ``FakeCuda``.

The runner, the probes and user tests hold "a CUDA backend": ``torch`` (what
``torch.cuda.cudart()`` returns), ``runtime`` (``cuda.bindings.runtime``), one ``trace``,
one fault plan (``faults``/``inject``), ``live_registrations()``/``leak_report()``, and
``patch()``. :class:`CudaBackend` names that surface; ``FakeCuda`` and ``RealCuda`` both
satisfy it, and a test checks the names and signatures agree. Both real modules are wrapped
by the very :class:`~kvreg.fakes.recorder.Intercepted` layer the fake uses, so a fault plan
and a trace mean the same thing on either (ARCHITECTURE.md#one-scenario-one-way).

An injected fault on real hardware never reaches the driver: the call is answered by the
recorder, so the code under test sees the failure and rolls back real registrations.
``live_registrations()`` is computed from the trace (what succeeded and was not undone),
and :meth:`RealCuda.release_all` unregisters anything left — through the *unwrapped*
module, so a still-armed fault cannot keep pinned memory pinned.

Modules are imported on first use, never at load: this file imports on a machine without
CUDA. Tests pass the fake's unwrapped faces as ``runtime_module``/``torch_module`` to
exercise the real backend's logic against a module that behaves like the real one.
"""

from __future__ import annotations

import types
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol, runtime_checkable

import numpy as np

from kvreg.fakes.address_space import AddressSpace, buffer_address
from kvreg.fakes.cuda import errors as E
from kvreg.fakes.cuda.cuda_python_face import OUTPUTS
from kvreg.fakes.cuda.fake_cuda import LiveRegistration
from kvreg.fakes.cuda.profile import DeviceProfile
from kvreg.fakes.faults import FaultPlan, FaultRule
from kvreg.fakes.recorder import Intercepted, Trace

from .memory import prefaulted

__all__ = ["INTERFACE", "CudaBackend", "HardwareUnavailable", "RealCuda",
           "VirtualBuffersUnsupported", "format_leaks", "live_from_trace"]

# the members a backend must offer, checked against FakeCuda by tests/realhw
INTERFACE = ("torch", "runtime", "trace", "faults", "profile", "inject", "live_registrations",
             "leak_report", "patch", "virtual", "track")


class HardwareUnavailable(RuntimeError):
    """The real module cannot be reached here; the message says what is missing."""


class VirtualBuffersUnsupported(NotImplementedError):
    """Raised by ``RealCuda.virtual``: a real driver pins real RAM, so no virtual pools."""


@runtime_checkable
class CudaBackend(Protocol):
    """What the runner and the fidelity probes need of a CUDA backend, fake or real."""

    trace: Trace
    faults: FaultPlan

    @property
    def torch(self) -> Any: ...

    @property
    def runtime(self) -> Any: ...

    @property
    def profile(self) -> DeviceProfile: ...

    def inject(self, api: str, *, nth: int | None = None, error: int | str | Any = None,
               **kwargs: Any) -> FaultRule: ...

    def live_registrations(self) -> list[LiveRegistration]: ...

    def leak_report(self) -> str: ...

    def patch(self, *, torch: bool = True, cuda_bindings: bool = True,
              cuda_machine: bool = False) -> Any: ...

    def virtual(self, shape: Sequence[int] | int, dtype: Any = "uint8", *,
                name: str = "") -> Any: ...

    def track(self, obj: Any, *, name: str = "") -> Any: ...


def _as_ptr(value: Any) -> int:
    """A pointer argument as either binding accepts it (int, None, buffer object)."""
    if value is None:
        return 0
    if isinstance(value, int):
        return int(value)
    try:
        return buffer_address(value)[0]
    except TypeError:
        return int(value)


def live_from_trace(trace: Trace) -> list[tuple[int, int, int]]:
    """(base, size, flags) of every registration the trace made and did not undo.

    Successful ``cudaHostRegister`` calls add their base; successful ``cudaHostUnregister``
    calls remove it. Injected results are not real calls and change nothing.
    """
    live: dict[int, tuple[int, int, int]] = {}
    for entry in trace:
        if entry.injected or entry.code != 0:
            continue
        if entry.api == "cudaHostRegister" and len(entry.args) == 3:
            ptr = _as_ptr(entry.args[0])
            live[ptr] = (ptr, int(entry.args[1]), int(entry.args[2]))
        elif entry.api == "cudaHostUnregister" and entry.args:
            live.pop(_as_ptr(entry.args[0]), None)
    return sorted(live.values())


def format_leaks(live: Sequence[LiveRegistration]) -> str:
    """The leak report text FakeCuda writes: empty when nothing leaked."""
    if not live:
        return ""
    lines = [f"{len(live)} host registration(s) still live (never unregistered):"]
    lines += [f"  {r.describe()}" for r in live]
    return "\n".join(lines)


class _BindingsModule(types.ModuleType):
    """The real ``cuda.bindings.runtime`` plus ``bindings_major``, which the recorder reads
    to give an injected cudaMemcpyBatchAsync failure the 12.x arity ``(err, None)``."""

    def __init__(self, target: Any, major: int) -> None:
        super().__init__(getattr(target, "__name__", "cuda.bindings.runtime"))
        self.__dict__["_target"] = target
        self.__dict__["bindings_major"] = major

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_target"], name)


def _bindings_major(module: Any) -> int:
    major = getattr(module, "bindings_major", None)
    if isinstance(major, int):
        return major
    try:
        from importlib import metadata

        return int(metadata.version("cuda-bindings").split(".", 1)[0])
    except Exception:
        return 13


class RealCuda:
    """The real CUDA runtimes of this process, recorded and fault-injected like the fake.

    ``runtime_module`` / ``torch_module`` default to ``cuda.bindings.runtime`` and
    ``torch.cuda.cudart()``; pass stand-ins to test this class without a GPU.
    """

    def __init__(self, *, runtime_module: Any = None, torch_module: Any = None,
                 profile: DeviceProfile | None = None) -> None:
        self.space = AddressSpace()
        self.trace = Trace()
        self.trace.describe_ptr = self.space.describe
        self.faults = FaultPlan()
        self._runtime_module = runtime_module
        self._torch_module = torch_module
        self._runtime: Any = None
        self._torch: Any = None
        self._profile = profile
        self._stand_in_torch = torch_module is not None

    # -- the two faces ------------------------------------------------------------------------
    def _resolve(self, ptr: int) -> tuple[str, int] | None:
        hit = self.space.owner(ptr)
        return None if hit is None else (hit[0].name, hit[1])

    @property
    def runtime_module(self) -> Any:
        """The unwrapped cuda-python runtime (no trace, no faults)."""
        if self._runtime_module is None:
            try:
                from cuda.bindings import runtime
            except ImportError as exc:
                raise HardwareUnavailable(
                    "cuda-bindings is not installed (pip install 'kvreg[cuda]')") from exc
            self._runtime_module = runtime
        return self._runtime_module

    @property
    def torch_module(self) -> Any:
        """The unwrapped ``torch.cuda.cudart()``; HardwareUnavailable says why it is missing."""
        if self._torch_module is None:
            try:
                import torch
            except ImportError as exc:
                raise HardwareUnavailable("torch is not installed") from exc
            try:
                self._torch_module = torch.cuda.cudart()  # type: ignore[no-untyped-call]
            except (AssertionError, RuntimeError) as exc:
                # CPU build: AssertionError; CUDA build with no driver or GPU: RuntimeError
                raise HardwareUnavailable(
                    f"torch.cuda.cudart() is unavailable ({type(exc).__name__}: "
                    f"{exc})") from exc
        return self._torch_module

    @property
    def runtime(self) -> Any:
        """``cuda.bindings.runtime`` behind the recorder and the fault plan."""
        if self._runtime is None:
            module = self.runtime_module
            target = module if hasattr(module, "bindings_major") else \
                _BindingsModule(module, _bindings_major(module))
            self._runtime = Intercepted(target, face="cuda", trace=self.trace,
                                        plan=self.faults, resolve=self._resolve,
                                        outputs=OUTPUTS)
        return self._runtime

    @property
    def torch(self) -> Any:
        """``torch.cuda.cudart()`` behind the recorder and the fault plan."""
        if self._torch is None:
            self._torch = Intercepted(self.torch_module, face="torch", trace=self.trace,
                                      plan=self.faults, resolve=self._resolve)
        return self._torch

    @property
    def profile(self) -> DeviceProfile:
        """The fake's profile for this machine (its measured facts; see ``profile_for``)."""
        if self._profile is None:
            from .capabilities import detect, profile_for

            self._profile = profile_for(detect(self.runtime_module, rdma=False, torch=False))
        return self._profile

    # -- memory -----------------------------------------------------------------------------
    def virtual(self, shape: Sequence[int] | int, dtype: Any = "uint8", *,
                name: str = "") -> Any:
        """Virtual buffers are fake-only: a real driver pins real pages."""
        raise VirtualBuffersUnsupported(
            "virtual buffers are fake-only: cudaHostRegister on a real driver pins real RAM. "
            "Use RealCuda.buffer(nbytes) for prefaulted host memory, and scale the scenario "
            "to this machine (kvreg.realhw.sizing)")

    def track(self, obj: Any, *, name: str = "") -> Any:
        """Name a real buffer so traces and leak reports can point into it."""
        self.space.track(obj, name=name)
        return obj

    def buffer(self, nbytes: int, *, name: str = "", fill: int = 0) -> np.ndarray:
        """Prefaulted, page-aligned host memory, tracked by name.

        The address space keeps the array alive until ``forget(buffer)``; register it,
        unregister it, then forget it to give the memory back.
        """
        arr = prefaulted(nbytes, fill=fill)
        self.track(arr, name=name or f"host@{arr.ctypes.data:#x}")
        return arr

    def forget(self, obj: Any) -> None:
        """Stop tracking a buffer from :meth:`buffer` or :meth:`track` (frees it if unused)."""
        self.space.forget(buffer_address(obj)[0])

    def torch_next_op(self) -> str:
        """Run one tiny CUDA op through torch and say whether it raised.

        docs/cuda-runtime.md §6: a failed cudaHostRegister leaves its error pending in
        torch's runtime, and the next kernel-launch check reports it against an unrelated
        op. Probes call this after a deliberate torch-side failure to record whether that
        happens on this machine (and to drain the pending error before later probes).
        """
        if self._stand_in_torch:
            return "n/a (stand-in torch module)"
        try:
            import torch

            torch.zeros(1, device="cuda").add_(1)
            torch.cuda.synchronize()
        except Exception as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            return f"raised {type(exc).__name__}: {first}"
        return "ok"

    # -- faults -------------------------------------------------------------------------------
    def inject(self, api: str, *, nth: int | None = None, error: int | str | Any = None,
               **kwargs: Any) -> FaultRule:
        """Arm a fault exactly as ``FakeCuda.inject`` does; the real call is then not made."""
        point = api if "." in api or api == "*" else f"cudart.{api}"
        if error is None and "raise_" not in kwargs and "delay" not in kwargs:
            error = E.INVALID_VALUE
        return self.faults.arm(point, error=error, nth=nth, **kwargs)

    # -- reports ------------------------------------------------------------------------------
    def live_registrations(self) -> list[LiveRegistration]:
        """What this backend registered (per its trace) and has not unregistered."""
        out = []
        for base, size, flags in live_from_trace(self.trace):
            hit = self._resolve(base)
            out.append(LiveRegistration(base, size, flags, hit[0] if hit else None,
                                        hit[1] if hit else None))
        return out

    def live(self) -> list[LiveRegistration]:
        """What is still registered, as a fake answers it (kvreg.fakes.protocol.Fake)."""
        return self.live_registrations()

    def leak_report(self) -> str:
        return format_leaks(self.live_registrations())

    def release_all(self) -> list[tuple[int, int]]:
        """Unregister every live registration through the unwrapped runtime.

        Bypasses the fault plan on purpose: this is the safety net that leaves the real
        driver clean after a failed scenario or probe. Returns (base, code) of each call;
        a released base is recorded in the trace as an ordinary unregister.
        """
        out = []
        for reg in self.live_registrations():
            result = self.runtime_module.cudaHostUnregister(reg.base)
            code = int(result[0]) if isinstance(result, tuple) else int(result)
            self.trace.append("cuda", "cudaHostUnregister", (reg.base,), code, result, False)
            out.append((reg.base, code))
        return out

    # -- activation ---------------------------------------------------------------------------
    @contextmanager
    def patch(self, *, torch: bool = True, cuda_bindings: bool = True,
              cuda_machine: bool = False) -> Iterator[RealCuda]:
        """A no-op: the real modules are already what ``torch.cuda.cudart()`` returns (and on a
        CUDA machine torch's device queries already answer truly: ``cuda_machine`` changes
        nothing).

        Code under test that calls the modules directly is not recorded; hand it
        ``backend.torch`` / ``backend.runtime`` to record and fault-inject its calls.
        """
        yield self

    def __enter__(self) -> RealCuda:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release_all()
