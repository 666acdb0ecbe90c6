"""Where in the code under test each violation happened: call sites and raise sites.

Measured in the worker, where the code runs (a report built later has only text): every
runtime call the trace records is given the innermost frame of the code under test that
made it, every exception the implementation's register or teardown raises the innermost
frame of its traceback by the same rule. kvreg's own code (fakes, harness, realhw), the
standard library and the runtime bindings (torch, cuda-python) are skipped: they are not
what a user can change. Library code the implementation calls counts as the user's: a thin
adapter over a library's pool module is placed at the library's line that raised, not at
the adapter's line that called it. A violation then gets the site its rule is about
(:func:`locate`): the bad call, the raise, or the function that left the bad state.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import linecache
import os
import re
import sys
import sysconfig
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from .progress import Progress
from .result import Violation
from .rules import (
    SITE_CALL,
    SITE_END,
    SITE_LAST_CALL,
    SITE_RAISE,
    SITE_RELEASE,
    SITE_STEP,
    SITE_TEARDOWN,
    get_rule,
)

if TYPE_CHECKING:
    from .implementation import Implementation

__all__ = ["CallSites", "Site", "display_path", "locate"]

_CALL_NO = re.compile(r"\(call #(\d+)\)")     # messages number calls from 1
_ROOT = Path(__file__).resolve().parents[2]       # the kvreg package
_OWN = tuple(str(_ROOT / d) + os.sep for d in ("fakes", "harness", "realhw"))
_RUNNER = _OWN[1:]                                # kvreg's code that calls the implementation
_STDLIB = tuple({str(Path(sysconfig.get_paths()[k]).resolve()) + os.sep
                 for k in ("stdlib", "platstdlib")})
# the runtime bindings (and pytest's own frames), by the folders they are installed in: a
# folder of the user's that happens to be called "torch" holds the user's code
_BINDING_PACKAGES = ("torch", "cuda.bindings", "pyverbs", "_pytest", "pluggy")


@functools.cache
def _binding_dirs() -> tuple[str, ...]:
    """Where the binding packages are installed (none of a package that is not)."""
    dirs: list[str] = []
    for name in _BINDING_PACKAGES:
        try:
            spec = importlib.util.find_spec(name)
        except (ImportError, ValueError):
            continue
        if spec is not None and spec.submodule_search_locations:
            dirs.extend(os.path.realpath(p) + os.sep for p in spec.submodule_search_locations)
    return tuple(dirs)


@dataclass(frozen=True)
class Site:
    """One line of the code under test."""

    path: str
    line: int

    @property
    def where(self) -> str:
        return f"{display_path(self.path)}:{self.line}"

    @property
    def code(self) -> str:
        return linecache.getline(self.path, self.line).strip()


def display_path(path: str) -> str:
    """``path`` as the user would open it: relative to the current folder when inside it."""
    try:
        return os.path.relpath(path) if Path(path).resolve().is_relative_to(Path.cwd()) \
            else path
    except (OSError, ValueError):
        return path


@functools.cache
def _foreign(filename: str) -> bool:
    """Whether a frame of ``filename`` is not the user's: kvreg's, the stdlib's, a binding's."""
    if filename.startswith("<"):
        return True
    path = os.path.realpath(filename)
    return path.startswith(_OWN) or path.startswith(_STDLIB) or path.startswith(_binding_dirs())


@functools.cache
def _runner(filename: str) -> bool:
    """Whether ``filename`` is kvreg's code that calls the implementation (harness, realhw)."""
    return os.path.realpath(filename).startswith(_RUNNER)


_AT_USER, _AT_FOREIGN, _AT_RUNNER = 0, 1, 2
_KINDS: dict[str, int] = {}   # a frame's file: what the call-site walk does at it (per call)


def _frame_kind(filename: str) -> int:
    """The user's frame (the walk stops there), a foreign one it passes, or kvreg's runner
    (the call has no site)."""
    if not _foreign(filename):
        return _AT_USER
    return _AT_RUNNER if _runner(filename) else _AT_FOREIGN


def _innermost(frames: Sequence[tuple[str, int]]) -> Site | None:
    """The innermost frame that is not kvreg's, the standard library's or a binding's: the
    call sites' rule (:meth:`CallSites.note_call`)."""
    for filename, line in reversed(frames):
        if not _foreign(filename):
            return Site(filename, line)
    return None


def _def_site(fn: Callable[..., Any] | None) -> Site | None:
    code = getattr(getattr(fn, "__wrapped__", fn), "__code__", None)
    if code is None or _foreign(code.co_filename):
        return None
    return Site(code.co_filename, code.co_firstlineno)


class CallSites:
    """The sites of one run: each recorded call's, and each raise of register / teardown."""

    def __init__(self, impl: Implementation) -> None:
        self.impl = impl
        self.calls: dict[int, Site] = {}
        self.last_register: Site | None = None     # the last registration call's site
        self.raises: dict[str, list[Site]] = {"register": [], "teardown": []}

    def wrap(self) -> Implementation:
        """``impl`` with register and teardown that note where they raised (then re-raise)."""
        impl = self.impl
        return dataclasses.replace(
            impl, register_fn=self._noting(impl.register_fn, "register"),
            teardown_fn=self._noting(impl.teardown_fn, "teardown"))

    def _noting(self, fn: Callable[..., Any] | None, phase: str) -> Callable[..., Any] | None:
        if fn is None:
            return None
        raises = self.raises[phase]

        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except BaseException as exc:
                frames = [(f.filename, f.lineno or 0)
                          for f in traceback.extract_tb(exc.__traceback__)]
                site = _innermost(frames)
                if site is not None:
                    raises.append(site)
                raise
        return call

    def progress(self, inner: Progress) -> Progress:
        """A progress sink that also notes the call site of every call the trace records."""
        return _Noting(inner, self)

    def note_call(self, trace: Any, frame: FrameType | None) -> None:
        n = len(trace)
        if not n:
            return
        # the innermost user frame inside the implementation: the walk stops at kvreg's
        # runner (harness, realhw), so a call kvreg's own reference makes has no site
        kinds = _KINDS
        while frame is not None:
            name = frame.f_code.co_filename
            kind = kinds.get(name)
            if kind is None:
                kind = kinds[name] = _frame_kind(name)
            if kind == _AT_USER:
                break
            if kind == _AT_RUNNER:
                return
            frame = frame.f_back
        if frame is not None:
            entry = trace[n - 1]
            site = Site(frame.f_code.co_filename, frame.f_lineno)
            self.calls[int(entry.seq)] = site
            api = str(entry.api).lower()
            if ("register" in api and "unregister" not in api) or api == "reg_mr":
                self.last_register = site

    def site_for(self, v: Violation) -> Site | None:
        """The site a violation of ``v.rule`` is about, as its rule says where it is taken
        (harness/run/rules.py; None when none is known)."""
        found = get_rule(v.rule)
        kind = found.site if found is not None else SITE_END
        register_def = _def_site(self.impl.register_fn)
        teardown_def = _def_site(self.impl.teardown_fn)
        if kind == SITE_STEP and "after teardown" in v.message:
            return teardown_def
        if kind == SITE_CALL:
            return self.calls.get(v.seq) or register_def
        if kind == SITE_RAISE:
            raised = self.raises["register"]
            return raised[-1] if raised else register_def
        if kind == SITE_TEARDOWN:
            raised = self.raises["teardown"]
            return raised[0] if raised else teardown_def
        if kind == SITE_RELEASE:
            # a chunk a failed rollback unregister left behind: that call's site
            named = _CALL_NO.search(v.message)
            site = self.calls.get(int(named.group(1)) - 1) if named else None
            return site or teardown_def
        if kind == SITE_LAST_CALL and self.calls:
            return self.calls[max(self.calls)]
        # the end state register left (gaps, seams, copies across seams): the registration
        # call that chose the chunks, else the register function
        return self.last_register or register_def


class _Noting(Progress):
    """Delegates to the run's own progress; wraps the trace's observer to note call sites."""

    def __init__(self, inner: Progress, sites: CallSites) -> None:
        super().__init__()
        self.inner = inner
        self.sites = sites

    def step(self, what: str, buffer: str | None = None) -> None:
        self.inner.step(what, buffer)

    def watch(self, trace: Any) -> None:
        self.inner.watch(trace)
        counted = trace.observer
        note = self.sites.note_call
        getframe = sys._getframe

        def seen(api: str) -> None:
            if counted is not None:
                counted(api)
            note(trace, getframe(1))

        trace.observer = seen

    def calls(self) -> list[tuple[str, int]]:
        return self.inner.calls()


def locate(violations: Sequence[Violation], sites: CallSites) -> list[Violation]:
    """Each violation with the ``where`` and ``code`` of its site (kept when already set)."""
    out = []
    for v in violations:
        site = None if v.where else sites.site_for(v)
        out.append(dataclasses.replace(v, where=site.where, code=site.code)
                   if site is not None else v)
    return out
