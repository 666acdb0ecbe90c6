"""Implementation styles of the public contract, behind one small interface.

``reference`` is kvreg's own; ``sglang`` calls ``register(buffer, G)`` / ``teardown(buffer)``
with cudart from ``torch.cuda.cudart()`` and the limit from
``SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB``; ``generic`` calls ``register(cudart, ptr, nbytes,
*, granularity, chunk_limit)`` / ``teardown(cudart, ranges)``; ``ctypes`` and ``driver`` call
``register(ptr, nbytes, *, granularity, chunk_limit)`` / ``teardown(ranges)`` and leave the code
to reach CUDA itself: libcudart through ``ctypes.CDLL`` (the approach of current vLLM, which
keeps registration and error draining on one runtime handle) or ``cuda.bindings.driver``'s
``cuMemHostRegister`` (which leaves runtime error state alone). Each target says how the
styles it runs are called on it and which reference it has (``Target.style_calls``, its
``styles.py``); this module loads an implementation and checks its signatures against them.

The keywords ``chunk_limit``, ``granularity`` (and Mooncake's ``max_mr_size``) are contracts
the implementation declares (:mod:`.contract`): one its register does not take, or takes with
the default None, reaches it as nothing or None, and the rules of that contract do not judge it.
So is a repeatable teardown: the teardown function's ``repeatable = True`` attribute (the
reference and the sglang style promise it by themselves); without it kvreg tears down once.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .contract import ABSENT, Contract, contract_of, declared_repeatable
from .process import EnvRead, import_scope, installed, watching_env
from .targets import REFERENCE_STYLE, TARGETS, get_target, style_contract, user_styles

__all__ = ["Implementation", "ImplementationError", "check_signature",
           "load_callable", "make_implementation", "style_calls"]

class ImplementationError(ValueError):
    """A SPEC that cannot be loaded, or a style that cannot run a scenario."""


# how a style calls one of the two functions: the signature shown in usage errors, and the
# positional arguments and keywords (placeholders) a signature must bind
StyleCall = tuple[str, tuple[Any, ...], tuple[str, ...]]


def style_calls() -> dict[str, tuple[StyleCall, StyleCall]]:
    """style -> how it calls register and teardown, from every target that runs it
    (Target.style_calls: each target says how the styles it runs are called on it)."""
    calls: dict[str, tuple[StyleCall, StyleCall]] = {}
    for name in TARGETS:
        calls.update(get_target(name).style_calls)
    return calls


def _check_closes(style: str, o_style: str, o_teardown: str) -> None:
    """``--teardown close`` only for a style whose teardown may be closing what it
    registered through (StyleContract.closes)."""
    if (declared := style_contract(style)) is not None and declared.closes:
        return
    closers = [(s, c.closes) for s in user_styles()
               if (c := style_contract(s)) is not None and c.closes]
    what = " or ".join(sorted({str(c) for _, c in closers})) or "a store"
    raise ImplementationError(f"{o_teardown} close closes {what}: it needs {o_style} "
                              + " or ".join(s for s, _ in closers))


def check_signature(fn: Callable[..., Any], style: str, role: int, option: str,
                    spec: str) -> None:
    """Refuse, before anything runs, a function the style's call cannot bind to
    (``role`` 0: register, 1: teardown); a signature Python cannot read is taken as is."""
    expected, args, keywords = style_calls()[style][role]
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    if role == 0:   # a contract keyword it does not take is not passed (contract.py)
        contract = contract_of(style, fn)
        keywords = tuple(k for k in keywords if contract.mode(k) != ABSENT)
    else:
        try:
            declared_repeatable(fn)
        except ValueError as exc:
            name = getattr(fn, "__name__", type(fn).__name__)
            raise ImplementationError(f"{option} {spec!r}: {name}: {exc}") from None
    try:
        sig.bind(*args, **dict.fromkeys(keywords))
    except TypeError as exc:
        name = getattr(fn, "__name__", type(fn).__name__)
        raise ImplementationError(
            f"{option} {spec!r}: {name}{sig} cannot take the {style} style's call "
            f"{expected} ({exc})") from None


def _file_module_name(path: Path) -> str:
    """The name a ``file.py`` spec's module is imported under (one per resolved path)."""
    return f"kvreg_user_{abs(hash(str(path.resolve())))}"


def spec_module(spec: str, base: Path | None = None) -> str:
    """The name of the module a loaded ``file.py:function`` or ``package.module:function``
    spec names: where the implementation's optional functions beside it are looked up."""
    target = spec.rpartition(":")[0]
    if target.endswith(".py"):
        path = Path(target)
        return _file_module_name(path if path.is_absolute() else (base or Path.cwd()) / path)
    return target


def load_callable(spec: str, base: Path | None = None,
                  option: str = "--impl") -> Callable[..., Any]:
    """``file.py:function`` or ``package.module:function`` -> the function.

    A relative ``file.py`` is resolved against ``base`` (the current folder by default: the
    CLI; the ini file's folder: the plugin), and its folder goes first on ``sys.path``, as
    ``python file.py`` would put it, so the file can import its neighbours. Errors name
    ``option``, the setting the SPEC came from.
    """
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr:
        raise ImplementationError(f"{option} {spec!r}: expected file.py:function or "
                                  "package.module:function")
    if target.endswith(".py"):
        path = Path(target)
        if not path.is_absolute():
            path = (base or Path.cwd()) / path
        if not path.is_file():
            raise ImplementationError(f"{option} {spec!r}: no such file {path}")
        path = path.resolve()
        folder = str(path.parent)
        if folder in sys.path:
            sys.path.remove(folder)
        sys.path.insert(0, folder)
        name = _file_module_name(path)
        module = sys.modules.get(name)
        if module is None:
            loader_spec = importlib.util.spec_from_file_location(name, path)
            if loader_spec is None or loader_spec.loader is None:
                raise ImplementationError(f"{option} {spec!r}: cannot import {target}")
            module = importlib.util.module_from_spec(loader_spec)
            sys.modules[name] = module
            try:
                loader_spec.loader.exec_module(module)
            except Exception as exc:
                del sys.modules[name]
                raise ImplementationError(f"{option} {spec!r}: importing {target} failed: "
                                          f"{type(exc).__name__}: {exc}") from None
    else:
        try:
            module = importlib.import_module(target)
        except Exception as exc:
            raise ImplementationError(f"{option} {spec!r}: cannot import {target}: "
                                      f"{type(exc).__name__}: {exc}") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ImplementationError(f"{option} {spec!r}: {target} has no function {attr!r}")
    return fn  # type: ignore[no-any-return]


@dataclass
class Implementation:
    """One implementation under test, callable per buffer."""

    style: str
    label: str
    register_fn: Callable[..., Any] | None = None
    teardown_fn: Callable[..., Any] | None = None
    # "required" / "optional" for the whole run, over each scenario's own ``pinning``
    pinning: str | None = None
    # the closing style's teardown is closing the store (``--teardown close``)
    teardown_close: bool = False
    # how it was loaded (impl, teardown, style, base), so a worker can import it anew with
    # its configuration set (harness/run/process.py); the modules that load added; the
    # watched environment variables they read while importing
    sources: tuple[str | None, str | None, str | None, Path | None] | None = None
    modules: tuple[str, ...] = ()
    # the module ``--impl`` names (its register may be imported there from another): where
    # functions "beside register" are found; None: register's own module
    home: str | None = None
    import_reads: tuple[EnvRead, ...] = ()
    # the contract its register declares (:attr:`contract`); a field, so that a copy with a
    # wrapped register (dataclasses.replace) keeps the one its own signature declares
    declared: Contract | None = None

    def reloaded(self) -> Implementation:
        """The same implementation imported anew: the modules its load added are dropped
        first, except installed packages' (:func:`~.process.installed`)."""
        if self.sources is None:
            return self
        for name in self.modules:
            module = sys.modules.get(name)
            if module is not None and not installed(module):
                del sys.modules[name]
        impl, teardown, style, base = self.sources
        fresh = make_implementation(impl, teardown, style, base=base)
        fresh.pinning = self.pinning
        fresh.import_reads = self.import_reads + fresh.import_reads
        return fresh

    def beside(self, name: str) -> Any:
        """The module-level object ``name`` beside register, in the module ``--impl`` names
        (register's own module when that is not known), or None."""
        module = sys.modules.get(self.home) if self.home is not None else None
        if module is not None:
            return getattr(module, name, None)
        fn = inspect.unwrap(self.register_fn) if self.register_fn is not None else None
        return getattr(fn, "__globals__", {}).get(name)

    @property
    def contract(self) -> Contract:
        """The contract its register and teardown declare (the sglang style: SGLang's; the
        reference: kvreg's), read once from register's signature and teardown's
        ``repeatable`` attribute."""
        if self.declared is None:
            self.declared = contract_of(self.style, self.register_fn, self.teardown_fn,
                                        close=self.teardown_close)
        return self.declared


def make_implementation(impl: str | None = None, teardown: str | None = None,
                        style: str | None = None, *, base: Path | None = None,
                        options: tuple[str, str, str] = ("--impl", "--teardown", "--style")
                        ) -> Implementation:
    """Build an Implementation from CLI/ini values (all None: kvreg's reference).

    ``base`` is the folder relative ``file.py`` specs are resolved against (default: the
    current folder); ``options`` are the names of the three settings, for the messages (the
    plugin passes its own). Both functions must accept the style's call: checked here, so a
    wrong signature is one usage error, not the same TypeError in every scenario.
    """
    o_impl, o_teardown, o_style = options
    if impl is None:
        if teardown is not None:
            raise ImplementationError(f"{o_teardown} needs {o_impl}")
        if style not in (None, REFERENCE_STYLE):
            raise ImplementationError(f"{o_style} {style} needs {o_impl}")
        return Implementation(REFERENCE_STYLE, "kvreg reference")
    style = style or "sglang"
    if style not in user_styles():
        raise ImplementationError(f"{o_style} must be one of {', '.join(user_styles())}; "
                                  f"got {style!r}")
    before = set(sys.modules)
    with watching_env() as reads, import_scope():
        register_fn = load_callable(impl, base, o_impl)
        if teardown == "close":
            _check_closes(style, o_style, o_teardown)
        check_signature(register_fn, style, 0, o_impl, impl)
        teardown_fn = None
        if teardown != "close":
            label, teardown_spec = o_teardown, teardown
            if teardown_spec is None:
                module_name, _, _ = impl.rpartition(":")
                teardown_spec = f"{module_name}:teardown"
                label = f"{o_teardown} (not given: 'teardown' next to {o_impl})"
            teardown_fn = load_callable(teardown_spec, base, label)
            check_signature(teardown_fn, style, 1, label, teardown_spec)
    return Implementation(style, impl, register_fn, teardown_fn,
                          teardown_close=teardown == "close",
                          sources=(impl, teardown, style, base),
                          home=spec_module(impl, base),
                          # its own modules too, when an earlier load had imported them
                          modules=tuple(sorted((set(sys.modules) - before) | {
                              fn.__module__ for fn in (register_fn, teardown_fn)
                              if fn is not None and fn.__module__ in sys.modules})),
                          import_reads=tuple(reads))
