"""Doors: stable per-process objects that forward to the innermost fake patched in.

Code under test holds on to what it reaches a library through: SGLang keeps
``torch.cuda.cudart()`` in a global, vLLM's ``CudaRTLibrary`` keeps its ``ctypes.CDLL`` (and
the ``argtypes`` it set on its function pointers), cuda-python code binds ``from
cuda.bindings.runtime import cudaHostRegister`` at import, Mooncake code keeps the store
class. A fake built per scenario would leave each of those pointing at the first scenario's
fake. So every patch installs the same :class:`Door` facade, which forwards each call to the
top of the door's stack: the fake patched in last (nested patching is pushing another one).

What cannot be forwarded is an object that belongs to one fake (a store set up against its
deployment, an opened device context). When a scope (:func:`retire_scope`) ends, the fakes
patched in during it are retired and the objects made through a door are marked
(:func:`make_stale`); a later call on one, or a call through a door while no fake is patched
in, raises :class:`StaleHandleError` and is recorded in the scope open at the time, so a
caller (kvreg's runner: one scope per scenario) can report it as its own error naming the
object and where the code keeps it, not as the code's failure.
"""

from __future__ import annotations

import importlib.machinery
import sys
import threading
import types
import weakref
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

__all__ = ["PROCESS", "Door", "FacadeModule", "ProcessState", "Scope", "StaleHandleError",
           "class_facade", "door_target", "enlist", "make_stale", "mark_constant",
           "report_stale", "retire_scope"]

# kvreg's own code (fakes/, harness/, realhw/): frames there are not the caller under test
_HERE = Path(__file__).resolve().parent
_KVREG_DIRS = tuple(f"{d}/" for d in (_HERE, _HERE.parent / "harness", _HERE.parent / "realhw"))
_LOCK = threading.Lock()


class StaleHandleError(RuntimeError):
    """A call that cannot reach the current scenario's fake (see the module docstring)."""


class Scope:
    """One span of use (a run, an import): what to retire at its end, what went stale."""

    def __init__(self) -> None:
        self.retire: list[Callable[[], None]] = []
        self.made: list[weakref.ref[Any]] = []
        self.stale: list[str] = []


_SCOPES: list[Scope] = []
_ORPHANS: list[str] = []   # stale calls seen while no scope was open


def enlist(retire: Callable[[], None]) -> None:
    """Have the innermost open scope call ``retire`` at its end (no scope: nothing to do)."""
    if _SCOPES and retire not in _SCOPES[-1].retire:
        _SCOPES[-1].retire.append(retire)


def _remember_made(obj: Any) -> None:
    if _SCOPES:
        with suppress(TypeError):   # not weakly referenceable: never marked stale
            _SCOPES[-1].made.append(weakref.ref(obj))


@contextmanager
def retire_scope() -> Iterator[Scope]:
    """The block is one span of use: at its end, retire what was patched in and made in it.

    ``scope.stale`` lists the calls that reached a retired fake (or a door with no fake
    patched in) during the block, each as one line naming the object and where it is held.
    """
    scope = Scope()
    _SCOPES.append(scope)
    try:
        yield scope
    finally:
        _SCOPES.remove(scope)
        for retire in scope.retire:   # first: a fake names its own objects best
            retire()
        for ref in scope.made:
            obj = ref()
            if obj is not None:
                make_stale(obj, "a retired fake")


def _caller() -> str:
    """The innermost frame outside kvreg: where the code under test made the call."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_KVREG_DIRS):
        frame = frame.f_back    # type: ignore[assignment]
    if frame is None:
        return "kvreg itself"
    return f"{frame.f_code.co_filename}:{frame.f_lineno} in {frame.f_code.co_name}"


def _holders(obj: Any) -> list[str]:
    """Module globals that hold ``obj`` (directly, or as the owner of a bound method)."""
    out = []
    for name, module in list(sys.modules.items()):
        space = getattr(module, "__dict__", None)
        if not isinstance(space, dict) or name.startswith("kvreg."):
            continue
        for key, value in list(space.items()):   # no getattr: a module's lazy names stay put
            if value is obj or (type(value) is types.MethodType and value.__self__ is obj):
                where = getattr(module, "__file__", None)
                out.append(f"{name}.{key}" + (f" ({where})" if where else ""))
    return out


def report_stale(what: str, obj: Any = None) -> NoReturn:
    """Record a call that cannot be forwarded and raise :class:`StaleHandleError`."""
    held = _holders(obj) if obj is not None else []
    line = f"{what}, called from {_caller()}"
    if held:
        line += f"; the code keeps it in {', '.join(held)}"
    with _LOCK:
        (_SCOPES[-1].stale if _SCOPES else _ORPHANS).append(line)
    raise StaleHandleError(f"kvreg: {line}. The object belongs to a fake that is done with; "
                           "reach the current one through its module (torch.cuda.cudart(), "
                           "ctypes.CDLL, cuda.bindings, pyverbs, mooncake.store)")


class ProcessState:
    """What one process keeps across the fakes patched into it, when ``carry`` is on.

    A worker that runs many scenarios is one process to the code under test: after the
    code's first successful ``cuInit`` it is right to call ``cuInit`` never again (the driver
    is initialised per process, docs/cuda-runtime.md §2.2). So, in such a worker, a fake
    patched in after one whose driver was initialised starts initialised, and the contexts
    (each thread's current context, the primary contexts' retains) are the process's, shared
    by every fake patched in (docs/cuda-runtime.md §13). Off by default: elsewhere (tests)
    every fake is a fresh process.
    """

    def __init__(self) -> None:
        self.carry = False
        self.driver_initialised = False
        self.contexts: Any = None   # the ContextState of the first fake patched in


PROCESS = ProcessState()


# -- stale objects ---------------------------------------------------------------------------
def _stale_class(cls: type, what: str) -> type:
    """A subclass of ``cls`` whose instances report every use. Made per object, not cached:
    a fake's classes (bound to it) die with it instead of living in a cache."""
    parent_get: Any = cls.__getattribute__

    def __getattribute__(self: Any, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            return parent_get(self, name)
        report_stale(f"{cls.__name__} object of {what} (.{name})", self)

    return type(cls.__name__, (cls,), {"__slots__": (), "__getattribute__": __getattribute__,
                                       "__module__": cls.__module__, "__doc__": cls.__doc__,
                                       "__kvreg_stale__": True})


def make_stale(obj: Any, what: str) -> None:
    """From now on, using ``obj``'s attributes reports it (dunder names still work, so the
    garbage collector, ``repr`` and ``isinstance`` are not disturbed)."""
    cls = type(obj)
    if cls.__dict__.get("__kvreg_stale__"):
        return
    with suppress(TypeError):   # a layout Python cannot swap (an extension type): left usable
        obj.__class__ = _stale_class(cls, what)


# -- doors -----------------------------------------------------------------------------------
class Door:
    """One library entry point: a stack of the fakes' objects behind one stable facade."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.stack: list[Any] = []
        self.info: list[dict[str, Any]] = []
        self.listeners: list[Callable[[], None]] = []   # told after each change of target

    @contextmanager
    def entered(self, target: Any, **info: Any) -> Iterator[None]:
        """``target`` answers this door for the block (over whatever answered before)."""
        self.stack.append(target)
        self.info.append(info)
        for listener in self.listeners:
            listener()
        try:
            yield
        finally:
            for i in range(len(self.stack) - 1, -1, -1):
                if self.stack[i] is target:
                    del self.stack[i]
                    del self.info[i]
                    break
            for listener in self.listeners:
                listener()

    def current(self, holder: Any = None) -> Any:
        if not self.stack:
            report_stale(f"{self.name} (a kvreg door) with no fake patched in", holder)
        return self.stack[-1]

    def top_info(self) -> dict[str, Any]:
        if not self.info:
            self.current()
        return self.info[-1]

    def forwarder(self, name: str, holder: Any = None) -> Callable[..., Any]:
        """A function that calls ``name`` of the current target (stable across fakes)."""
        stack = self.stack

        def forward(*args: Any, **kwargs: Any) -> Any:
            try:
                target = stack[-1]
            except IndexError:
                target = self.current(forward)
            return getattr(target, name)(*args, **kwargs)

        forward.__name__ = forward.__qualname__ = name
        return forward


class _FacadeMeta(type):
    """A class facade: calling it builds the current fake's class; isinstance asks it too."""

    _kvreg_door: Door
    _kvreg_name: str

    def _kvreg_current(cls) -> Any:
        return getattr(cls._kvreg_door.current(cls), cls._kvreg_name)

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        obj = cls._kvreg_current()(*args, **kwargs)
        _remember_made(obj)
        return obj

    def __instancecheck__(cls, obj: Any) -> bool:
        # the fake's class, or the class it is bound from: a store of another node of the
        # same deployment (PD scenarios run both nodes in one process) is one too
        current = cls._kvreg_current()
        return isinstance(obj, (current, *current.__bases__))

    def __subclasscheck__(cls, sub: Any) -> bool:
        current = cls._kvreg_current()
        return issubclass(sub, (current, *current.__bases__))

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return getattr(cls._kvreg_current(), name)


def class_facade(door: Door, name: str, module: str) -> type:
    """The stable stand-in of class ``name`` of the fakes behind ``door``."""
    return _FacadeMeta(name, (), {"_kvreg_door": door, "_kvreg_name": name,
                                  "__module__": module,
                                  "__doc__": f"{module}.{name} of the fake patched in now."})


_MODULE_FACADES: dict[str, FacadeModule] = {}
# fake modules whose namespace never changes once built (shared by every fake: the pyverbs
# enum modules): a door mirrors one only when it changes to it
_CONSTANT: weakref.WeakSet[Any] = weakref.WeakSet()


def mark_constant(module: types.ModuleType) -> types.ModuleType:
    """Declare ``module``'s namespace final (see :data:`_CONSTANT`); returns it."""
    _CONSTANT.add(module)
    return module


def _ref(obj: Any) -> Callable[[], Any]:
    """A weak reference to ``obj`` (one that answers None where ``obj`` takes none)."""
    try:
        return weakref.ref(obj)
    except TypeError:
        return lambda: None


class FacadeModule(types.ModuleType):
    """A module that forwards every attribute to ``door``'s current target.

    Functions come back as stable forwarders (cached: later lookups skip the door), so a
    name bound at import keeps reaching whichever fake is patched in when it is called.
    The classes named in ``classes`` (those a fake binds to itself, like pyverbs' ``Context``
    of one node or the Mooncake store class of one deployment) come back as stable
    :func:`class_facade` objects; other classes as the current target's own. A submodule
    comes back as its own door when it has one; other values are read from the current
    target on each access. With ``mirror``, each change of the door's target copies its
    namespace into this module (for fakes whose modules are plain namespaces: pyverbs,
    mooncake). ``fallback(name)`` answers a lookup while no fake is patched in (None: report it).
    """

    def __init__(self, name: str, door: Door, *, classes: Collection[str] = (),
                 fallback: Callable[[str], Any] | None = None,
                 package: bool = False, mirror: bool = False) -> None:
        super().__init__(name, f"{name} (kvreg door: the fake patched in now)")
        if package:
            self.__path__: list[str] = []
        # an installed module has a spec: code that asks importlib.util.find_spec whether the
        # package is there (SGLang's optional transports) gets one, not "__spec__ is None"
        self.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=package)
        self.__dict__.update(_kvreg_door=door, _kvreg_classes=frozenset(classes),
                             _kvreg_fallback=fallback, _kvreg_fake_module=True,
                             _kvreg_made={}, __getattr__=self._kvreg_getattr)
        _MODULE_FACADES[name] = self
        if mirror:
            door.listeners.append(self._kvreg_mirror)

    def __dir__(self) -> list[str]:
        door: Door = self.__dict__["_kvreg_door"]
        return dir(door.stack[-1]) if door.stack else []

    def _kvreg_getattr(self, name: str) -> Any:
        space = self.__dict__
        door: Door = space["_kvreg_door"]
        if name.startswith("__") and name.endswith("__"):
            if not door.stack:
                raise AttributeError(name)
            return getattr(door.stack[-1], name)
        if not door.stack:
            fallback = space["_kvreg_fallback"]
            if fallback is None:
                door.current(self)
            value = fallback(name)
        else:
            value = getattr(door.stack[-1], name)
        return self._kvreg_wrap(name, value, cache=True)

    def _kvreg_wrap(self, name: str, value: Any, *, cache: bool) -> Any:
        """What the door shows for the target's ``value`` of ``name`` (see the class doc)."""
        space = self.__dict__
        made: dict[str, Any] = space["_kvreg_made"]
        if isinstance(value, types.ModuleType):   # a submodule: its own door, if it has one
            return _MODULE_FACADES.get(value.__name__, value)
        if isinstance(value, type):
            if name not in space["_kvreg_classes"]:
                return value
            if name not in made:
                made[name] = class_facade(space["_kvreg_door"], name, self.__name__)
        elif callable(value) and not getattr(value, "_kvreg_not_modelled", False):
            if name not in made:
                made[name] = space["_kvreg_door"].forwarder(name, self)
        else:
            return value
        if cache:
            space[name] = made[name]
        return made[name]

    def _kvreg_mirror(self) -> None:
        """Show the current target's namespace as this module's own (``vars()`` and ``dir()``
        of the module then list what the fake's module holds, as on the real one). A
        constant target (:func:`mark_constant`) mirrored last time is not copied again."""
        door: Door = self.__dict__["_kvreg_door"]
        if not door.stack:
            return
        target = door.stack[-1]
        last = self.__dict__.get("_kvreg_mirrored")
        if last is not None and last() is target and target in _CONSTANT:
            return
        self.__dict__["_kvreg_mirrored"] = _ref(target)
        for name, value in list(vars(target).items()):
            if name.startswith("__") and name not in ("__doc__", "__all__"):
                continue
            self.__dict__[name] = self._kvreg_wrap(name, value, cache=False)

    if TYPE_CHECKING:   # at run time the instance's __getattr__ (PEP 562) answers: a class
        def __getattr__(self, name: str) -> Any: ...   # one would slow every cached hit


def door_target(obj: Any) -> Any:
    """What a door facade reaches now (``obj`` itself when it is no door): tests pin that
    ``torch.cuda.cudart()`` and the patched modules reach one fake's faces."""
    door = obj.__dict__.get("_kvreg_door") if isinstance(obj, FacadeModule) else None
    return obj if door is None else door.current(obj)
