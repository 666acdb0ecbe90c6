"""Implementation styles of the public contract, behind one small interface.

``reference`` is kvreg's own; ``sglang`` calls ``register(buffer, G)`` / ``teardown(buffer)``
with cudart from ``torch.cuda.cudart()`` and the limit from
``SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB``; ``generic`` calls ``register(cudart, ptr, nbytes,
*, granularity, chunk_limit)`` / ``teardown(cudart, ranges)``; ``ctypes`` and ``driver`` call
``register(ptr, nbytes, *, granularity, chunk_limit)`` / ``teardown(ranges)`` and leave the code
to reach CUDA itself: libcudart through ``ctypes.CDLL`` (the approach of current vLLM, which
keeps registration and error draining on one runtime handle) or ``cuda.bindings.driver``'s
``cuMemHostRegister`` (which leaves runtime error state alone). The sglang style gets the
granularity the real pool passes (None where upstream registers in one call); the reference
gets kvreg's copy unit, because it chunks every layout; the generic, ctypes and driver styles
get the pool's granularity where it passes one and kvreg's copy unit where it passes None (a
None would leave such an implementation no safe way to chunk a pool above the per-call
ceiling).

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvreg.harness.cuda import reference
from kvreg.harness.mooncake import reference as mooncake_reference
from kvreg.harness.plan.chunking import reference_unit
from kvreg.harness.pools import BufferSpec
from kvreg.harness.pools.base import ExtentFamily

from .contract import ABSENT, Contract, contract_of, declared_repeatable
from .process import EnvRead, import_scope, installed, watching_env
from .style_names import SELF_REACHING, STYLES

__all__ = ["STYLE_CALLS", "Implementation", "ImplementationError", "check_signature",
           "load_callable", "make_implementation"]

GiB = 1 << 30


class ImplementationError(ValueError):
    """A SPEC that cannot be loaded, or a style that cannot run a scenario."""


# how each style calls the two functions: the signature shown in usage errors, and the
# positional arguments and keywords (placeholders) a signature must bind
_P = None
STYLE_CALLS: dict[str, tuple[tuple[str, tuple[Any, ...], tuple[str, ...]],
                             tuple[str, tuple[Any, ...], tuple[str, ...]]]] = {
    "sglang": (("register(buffer, granularity)", (_P, _P), ()),
               ("teardown(buffer)", (_P,), ())),
    "generic": (("register(cudart, ptr, nbytes, *, granularity, chunk_limit)", (_P, 0, 0),
                 ("granularity", "chunk_limit")),
                ("teardown(cudart, ranges)", (_P, _P), ())),
    "ctypes": (("register(ptr, nbytes, *, granularity, chunk_limit)", (0, 0),
                ("granularity", "chunk_limit")),
               ("teardown(ranges)", (_P,), ())),
    "mooncake": (("register(store, ptr, nbytes, *, max_mr_size, granularity)", (_P, 0, 0),
                  ("max_mr_size", "granularity")),
                 ("teardown(store, ranges)", (_P, _P), ())),
}
STYLE_CALLS["driver"] = STYLE_CALLS["ctypes"]


def check_signature(fn: Callable[..., Any], style: str, role: int, option: str,
                    spec: str) -> None:
    """Refuse, before anything runs, a function the style's call cannot bind to
    (``role`` 0: register, 1: teardown); a signature Python cannot read is taken as is."""
    expected, args, keywords = STYLE_CALLS[style][role]
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
        name = f"kvreg_user_{abs(hash(str(path.resolve())))}"
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
    # mooncake style: teardown is closing the store (``--teardown close``)
    teardown_close: bool = False
    # how it was loaded (impl, teardown, style, base), so a worker can import it anew with
    # its configuration set (harness/run/process.py); the modules that load added; the
    # watched environment variables they read while importing
    sources: tuple[str | None, str | None, str | None, Path | None] | None = None
    modules: tuple[str, ...] = ()
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

    @property
    def contract(self) -> Contract:
        """The contract its register and teardown declare (the sglang style: SGLang's; the
        reference: kvreg's), read once from register's signature and teardown's
        ``repeatable`` attribute."""
        if self.declared is None:
            self.declared = contract_of(self.style, self.register_fn, self.teardown_fn,
                                        close=self.teardown_close)
        return self.declared

    def granularity(self, spec: BufferSpec, limit: int,
                    families: Sequence[ExtentFamily] | None, index: int) -> int | None:
        """The granularity register gets (None too where its register declares none); a
        copy unit is chosen under ``limit`` only where the register declares a chunk limit."""
        if self.style in ("generic", *SELF_REACHING):
            if not self.contract.granularity:
                return None
            if spec.granularity is None:
                return reference_unit(spec, limit if self.contract.limit else 1 << 62,
                                      families, index)[0]
        if self.style == "reference":
            return reference_unit(spec, limit, families, index)[0]
        return spec.granularity

    def register(self, cudart: Any, buffer: Any, spec: BufferSpec, granularity: int | None,
                 limit: int) -> Any:
        """Register one buffer; returns the handle teardown needs."""
        if self.style == "reference":
            return reference.register(cudart, int(buffer.data_ptr()), spec.nbytes,
                                      granularity=granularity, chunk_limit=limit)
        assert self.register_fn is not None
        keywords = self.contract.kwargs(granularity=granularity, chunk_limit=limit)
        if self.style == "generic":
            return self.register_fn(cudart, int(buffer.data_ptr()), spec.nbytes, **keywords)
        if self.style in SELF_REACHING:
            return self.register_fn(int(buffer.data_ptr()), spec.nbytes, **keywords)
        if self.style == "sglang":
            self.register_fn(buffer, granularity)   # upstream passes G positionally
            return buffer
        raise ImplementationError(f"style {self.style!r} does not register CUDA buffers")

    def teardown(self, cudart: Any, buffer: Any, handle: Any) -> Any:
        if self.style == "reference":
            return reference.teardown(cudart, handle)
        assert self.teardown_fn is not None
        if self.style == "generic":
            return self.teardown_fn(cudart, handle)
        if self.style in SELF_REACHING:
            return self.teardown_fn(handle)
        return self.teardown_fn(buffer)

    def check_limit(self, limit: int) -> str | None:
        """Why this style cannot express a chunk limit, or None."""
        if self.style == "mooncake":
            return ("the mooncake style registers with a Mooncake store; this scenario "
                    "registers with CUDA")
        if self.style == "sglang" and limit % GiB:
            return (f"the sglang style reads whole GiB from SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB;"
                    f" this scenario's limit is {limit} bytes")
        return None

    # -- mooncake style: MRs through a Mooncake store (harness.mooncake.target) ------------
    def register_mr(self, store: Any, ptr: int, nbytes: int, *, max_mr_size: int | None,
                    granularity: int | None) -> Any:
        """Register one buffer with the store; returns the ranges teardown_mr needs."""
        if self.style == "reference":
            return mooncake_reference.register(store, ptr, nbytes, max_mr_size=max_mr_size,
                                               granularity=granularity)
        if self.style == "mooncake":
            assert self.register_fn is not None
            return self.register_fn(store, ptr, nbytes, **self.contract.kwargs(
                max_mr_size=max_mr_size, granularity=granularity))
        raise ImplementationError(f"style {self.style!r} registers CUDA buffers, not MRs "
                                  "with a Mooncake store (use --style mooncake)")

    def teardown_mr(self, store: Any, ranges: Any) -> Any:
        """Unregister what register_mr returned (called once per teardown round that the
        contract lets run)."""
        if self.teardown_close:
            return store.close()
        if self.style == "reference":
            return mooncake_reference.teardown(store, ranges)
        assert self.teardown_fn is not None
        return self.teardown_fn(store, ranges)

    def computes_own_mr_limit(self) -> bool:
        """Whether register_mr accepts ``max_mr_size=None`` and then computes the limit
        itself: the reference does; a mooncake-style function says so by giving the
        parameter the default None, or by not taking it."""
        if self.style == "reference":
            return True
        return self.style == "mooncake" and not self.contract.limit

    def registers_mrs(self) -> bool:
        """Whether this implementation can run Mooncake scenarios."""
        return self.style in ("reference", "mooncake")


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
        if style not in (None, "reference"):
            raise ImplementationError(f"{o_style} {style} needs {o_impl}")
        return Implementation("reference", "kvreg reference")
    style = style or "sglang"
    if style not in STYLES or style == "reference":
        raise ImplementationError(f"{o_style} must be one of sglang, generic, mooncake, "
                                  f"ctypes, driver; got {style!r}")
    before = set(sys.modules)
    with watching_env() as reads, import_scope():
        register_fn = load_callable(impl, base, o_impl)
        if teardown == "close" and style != "mooncake":
            raise ImplementationError(f"{o_teardown} close closes a Mooncake store: it needs "
                                      f"{o_style} mooncake")
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
                          # its own modules too, when an earlier load had imported them
                          modules=tuple(sorted((set(sys.modules) - before) | {
                              fn.__module__ for fn in (register_fn, teardown_fn)
                              if fn is not None and fn.__module__ in sys.modules})),
                          import_reads=tuple(reads))
