"""One recorder and fault injector in front of any runtime face, fake or real.

``Intercepted`` wraps a module-like object (the fake's faces, or the real
``torch._C._cudart`` / ``cuda.bindings.runtime``) so that every ``cuda*`` call is checked
against a :class:`~kvreg.fakes.faults.FaultPlan` and recorded in a :class:`Trace`. Because it
sits in front of the backend, a fault plan and a trace mean the same on the fake and on
real hardware (design: "One scenario, end to end").
"""

from __future__ import annotations

import itertools
import threading
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from .cuda import errors as E
from .faults import FaultPlan

__all__ = ["Intercepted", "Trace", "TraceEntry"]

Face = Literal["torch", "cuda", "driver", "ctypes"]


@dataclass(frozen=True)
class TraceEntry:
    """One recorded call."""

    seq: int
    face: str
    api: str
    args: tuple[Any, ...]
    code: int | None       # the CUDA error code, None for calls that return no code
    result: Any            # what the call returned; the code alone when that is all it returned
    injected: bool
    thread: int

    @property
    def ok(self) -> bool:
        return self.code in (None, 0)


class Trace:
    """The calls a test made, in order; cheap to append, rich to read."""

    def __init__(self) -> None:
        self._rows: list[tuple[Any, ...]] = []
        self._seq = itertools.count()
        self.describe_ptr: Callable[[int], str] = lambda p: f"{p:#x}"
        # told the API name of every call as it is recorded (a supervised run counts calls
        # in shared memory, so the supervisor can say how far a run got if it dies)
        self.observer: Callable[[str], None] | None = None

    def append(self, face: str, api: str, args: tuple[Any, ...], code: int | None,
               result: Any, injected: bool) -> None:
        # list.append and next(count) are atomic under the GIL: no lock on the hot path
        self._rows.append((next(self._seq), face, api, args, code, result, injected,
                           threading.get_ident()))
        if self.observer is not None:
            self.observer(api)

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self) -> Iterator[TraceEntry]:
        return (TraceEntry(*row) for row in list(self._rows))

    def __getitem__(self, i: int) -> TraceEntry:
        return TraceEntry(*self._rows[i])

    def calls(self, api: str | None = None) -> list[TraceEntry]:
        return [e for e in self if api is None or e.api == api]

    def args(self, api: str) -> list[tuple[Any, ...]]:
        """The argument tuples of every call to ``api``, e.g. for exact-sequence asserts."""
        return [row[3] for row in self._rows if row[2] == api]

    def codes(self, api: str) -> list[int | None]:
        return [row[4] for row in self._rows if row[2] == api]

    def clear(self) -> None:
        """Forget recorded calls (sequence numbers keep counting, so entries stay unique)."""
        self._rows.clear()

    def format(self, limit: int | None = None) -> str:
        """Human-readable lines with pointers named by the buffer that owns them."""
        lines = []
        for e in list(self)[:limit]:
            shown = ", ".join(self._show(a) for a in e.args)
            res = "" if e.code is None else f" -> {e.code} {E.error_name(e.code)}"
            inj = " [injected]" if e.injected else ""
            lines.append(f"#{e.seq + 1} {e.face}.{e.api}({shown}){res}{inj}")
        return "\n".join(lines)

    def _show(self, arg: Any) -> str:
        if isinstance(arg, int) and not isinstance(arg, bool) and arg >= 1 << 16:
            return self.describe_ptr(arg)
        if isinstance(arg, list | tuple):
            if len(arg) > 4:
                return f"[{len(arg)} items]"
            return "[" + ", ".join(self._show(a) for a in arg) + "]"
        if arg is None or isinstance(arg, int | float | str | bytes):
            return repr(arg)
        if hasattr(arg, "value") and hasattr(arg, "name"):   # enum results passed back in
            return repr(arg)
        return type(arg).__name__


def _torch_code(result: Any) -> int | None:
    fast = getattr(result, "_value", None)   # the fake's enum
    if type(fast) is int:
        return fast
    value = getattr(result, "value", None)
    return value if isinstance(value, int) and hasattr(result, "name") else None


def _int_code(result: Any) -> int | None:
    return result if type(result) is int else None


def _cuda_code(result: Any) -> int | None:
    if isinstance(result, tuple) and result and hasattr(result[0], "name"):
        return int(result[0])
    return None


class Intercepted(types.ModuleType):
    """A module-like proxy: calls go through the fault plan and into the trace."""

    _kvreg_fake_module = True

    def __init__(self, target: Any, *, face: Face, trace: Trace, plan: FaultPlan,
                 family: str = "cudart",
                 resolve: Callable[[int], tuple[str, int] | None] | None = None,
                 outputs: dict[str, int] | None = None,
                 on_injected: Callable[[int], None] | None = None,
                 prefix: str = "cuda", aliases: dict[str, str] | None = None) -> None:
        super().__init__(getattr(target, "__name__", "intercepted"))
        self.__dict__.update(_kvreg_prefix=prefix, _kvreg_aliases=aliases or {},
            _kvreg_target=target, _kvreg_face=face, _kvreg_trace=trace, _kvreg_plan=plan,
            _kvreg_family=family, _kvreg_resolve=resolve, _kvreg_outputs=outputs or {},
            _kvreg_on_injected=on_injected,
            # a module-level __getattr__ (PEP 562), not a class one: a class __getattr__ slows
            # every hit, the cached wrappers included, by a bound-method allocation
            __getattr__=self._kvreg_getattr)

    if TYPE_CHECKING:   # for the type checker only; at run time the instance's __getattr__
        def __getattr__(self, name: str) -> Any: ...

    def __dir__(self) -> list[str]:
        return dir(self._kvreg_target)

    def _kvreg_getattr(self, name: str) -> Any:
        """A name not yet cached: the target's attribute, wrapped when it is a CUDA call."""
        value = getattr(self._kvreg_target, name)
        if not name.startswith(self._kvreg_prefix) or isinstance(value, type) or \
                not callable(value) or getattr(value, "_kvreg_not_modelled", False):
            return value
        wrapped = self._wrap(name, value)
        self.__dict__[name] = wrapped   # cached: later lookups skip _kvreg_getattr
        return wrapped

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._kvreg_target, name, value)

    def _error_result(self, api: str, code: int) -> Any:
        target = self._kvreg_target
        if self._kvreg_face == "torch":
            return target.cudaError(code)
        if self._kvreg_face == "ctypes":
            return code                 # a C int; out-parameters stay unwritten
        if self._kvreg_face == "driver":
            try:
                result = target.CUresult(code)
            except ValueError:          # a runtime-only code (e.g. 35) has no CUresult twin
                result = target.CUresult(999)
            return (result, *([None] * self._kvreg_outputs.get(api, 0)))
        n_out = self._kvreg_outputs.get(api, 0)
        if api == "cudaMemcpyBatchAsync" and getattr(target, "bindings_major", 13) == 12:
            n_out = 1
        return (target.cudaError_t(code), *([None] * n_out))

    def _wrap(self, api: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        point = f"{self._kvreg_family}.{api}"
        # a driver call also answers the fault points of its runtime twin (cuMemHostRegister
        # for cudart.cudaHostRegister), unless the plan names its own points
        alias = self._kvreg_aliases.get(api)
        face = self._kvreg_face
        trace = self._kvreg_trace
        plan = self._kvreg_plan
        resolve = self._kvreg_resolve
        code_of = {"torch": _torch_code, "ctypes": _int_code}.get(face, _cuda_code)
        on_injected = self._kvreg_on_injected
        torch_face = face == "torch"
        code_only = face in ("torch", "ctypes")   # results that are their code alone

        rules = plan._rules     # read directly: the empty-plan check is on every call
        rows = trace._rows
        seq = trace._seq
        get_ident = threading.get_ident

        check_args = getattr(self._kvreg_target, "_kvreg_check_args", None)

        def call(*args: Any, **kwargs: Any) -> Any:
            rule = None
            if rules:
                if check_args is not None:
                    check_args(api, args, kwargs)   # a bad call raises before any fault
                at = point
                if alias is not None and not any(r.matches_point(point) for r in rules):
                    at = alias
                rule = plan.check_call(at, args, kwargs, resolve)
            if rule is None:
                result = fn(*args, **kwargs) if kwargs else fn(*args)
                if torch_face:   # _torch_code's first test, inlined for the hot path
                    code = getattr(result, "_value", None)
                    if type(code) is not int:
                        code = code_of(result)
                else:
                    code = code_of(result)
                # a result that is only its code is stored as the code: rows of plain ints and
                # strings are untracked by the garbage collector, which keeps a trace of
                # millions of calls from slowing every later allocation
                kept = code if code is not None and (code_only or len(result) == 1) else result
                rows.append((next(seq), face, api, args, code, kept, False, get_ident()))
                observer = trace.observer
                if observer is not None:
                    observer(api)
                return result
            if rule.delay:
                time.sleep(rule.delay)
            if rule.raise_ is not None:
                trace.append(face, api, args, None, rule.raise_, True)
                raise rule.raise_
            if rule.error is None:      # delay only
                result = fn(*args, **kwargs)
                trace.append(face, api, args, code_of(result), result, False)
                return result
            result = self._error_result(api, rule.error)
            if on_injected is not None:
                on_injected(rule.error)
            trace.append(face, api, args, rule.error, result, True)
            return result

        call.__name__ = api
        call.__doc__ = getattr(fn, "__doc__", None)
        return call
