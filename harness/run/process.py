"""Process-level configuration: what code under test may read once per process.

Code reads some configuration once: an environment variable at import (SGLang's chunk
limit ``SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB``, Mooncake's ``MC_MAX_MR_SIZE``), or a
module-level cache of what the machine has (the device count, a NIC's ``max_mr_size``).
In a real deployment that is right: those values do not change while a process lives.
So kvreg makes each worker process one deployment: the supervisor gives a worker only
scenarios of one :class:`~.target.ProcessConfig` (the environment the scenario sets and
the machine it models), and the worker sets that environment and imports the
implementation's own modules anew under a fake of that machine *before* its first
scenario (:func:`prepare_worker`). Why not detect and refuse instead: refusing would
make correct code that reads its configuration once (most real code) unusable with kvreg.

Installed packages are not imported anew (they may register process-wide state, such as
torch operators, that a second import would break): when one of them read a watched
variable at import with another value than a scenario sets, that scenario is an ``error``
naming the module and the variable (:func:`import_conflict`), never a ``fail``.

A worker serves the next configuration too when, to every code outside kvreg, that one is
the same deployment (:func:`same_deployment`): each watched variable that code read (at
import or while a scenario ran: :func:`note_env_reads`) has the same value in both, and the
machine is the same or no code outside kvreg has run in the worker (kvreg's reference).
Within one configuration a verdict already never depends on the scenarios before it; a
configuration that differs only where nothing outside kvreg looked is, to the code under
test, the same one. Everything else gets a fresh worker.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from collections.abc import Iterator, MutableMapping
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Any

from .target import ProcessConfig
from .targets import default_configs, get_target, watched_env

if TYPE_CHECKING:
    from kvreg.harness.scenario.format import Scenario

__all__ = ["EnvRead", "apply_config_env", "import_conflict",
           "import_scope", "installed", "note_env_reads", "prepare_worker", "process_config",
           "same_deployment", "watched_values", "watching_env"]

_NO_CONFIG = ProcessConfig("none")

EnvRead = tuple[str, str, str | None]    # (variable, module that read it, value it saw)


def process_config(sc: Scenario) -> ProcessConfig:
    """The configuration a worker must have to run ``sc`` (one with nothing set when the
    scenario's target cannot say: such a scenario fails to build anyway)."""
    try:
        target: Any = get_target(sc.target)
        config = target.process_config(sc)
    except Exception:
        return _NO_CONFIG
    return config if isinstance(config, ProcessConfig) else _NO_CONFIG


class _WatchedEnviron(MutableMapping[str, str]):
    """``os.environ`` that notes which module reads a watched variable (and forwards all)."""

    def __init__(self, real: MutableMapping[str, str], reads: list[EnvRead]) -> None:
        self._real = real
        self._reads = reads

    def _note(self, key: object) -> None:
        if key in watched_env():
            self._reads.append((str(key), _reader(3), self._real.get(str(key))))

    def __getitem__(self, key: str) -> str:
        self._note(key)
        return self._real[key]

    def get(self, key: str, default: Any = None) -> Any:
        self._note(key)
        return self._real.get(key, default)

    def __contains__(self, key: object) -> bool:
        self._note(key)
        return key in self._real

    def __setitem__(self, key: str, value: str) -> None:
        self._real[key] = value

    def __delitem__(self, key: str) -> None:
        del self._real[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._real)

    def __len__(self) -> int:
        return len(self._real)

    def copy(self) -> dict[str, str]:
        return dict(self._real)


def _reader(depth: int) -> str:
    """The module of the frame ``depth`` levels up, past os, mapping and kvreg's wrappers."""
    frame: Any = sys._getframe(depth)
    while frame is not None and frame.f_globals.get("__name__") in (
            "os", __name__, "_collections_abc", "collections.abc", "typing"):
        frame = frame.f_back
    return str(frame.f_globals.get("__name__", "?")) if frame is not None else "?"


_READS_OUTSIDE_KVREG: set[str] = set()


class _NotingEnviron(os._Environ):   # type: ignore[type-arg]
    """``os.environ``'s own class plus one thing: a read of a watched variable by code
    outside kvreg is noted (the object, its data and every other method stay the same)."""

    def __getitem__(self, key: str) -> str:
        if key in watched_env() and not _reader(2).startswith("kvreg."):
            _READS_OUTSIDE_KVREG.add(key)
        return super().__getitem__(key)  # type: ignore[no-any-return]


def note_env_reads() -> set[str]:
    """From now on in this process, note which watched variables code outside kvreg reads
    (``get``, ``in``, ``[]``, ``getenv``, copies; also through a ``from os import environ``
    taken earlier: the object stays the same, only its class gains the note); returns the
    live set. A worker calls this once: it decides whether the worker may serve another
    configuration (:func:`same_deployment`)."""
    watched_env()    # every target imported before a read can ask (no import inside a read)
    if type(os.environ) is os._Environ:
        os.environ.__class__ = _NotingEnviron
    return _READS_OUTSIDE_KVREG


def watched_values() -> dict[str, str | None]:
    """The watched variables as this process has them now."""
    return {key: os.environ.get(key) for key in watched_env()}


def _effective(config: ProcessConfig, base: dict[str, str | None]) -> dict[str, str | None]:
    """The watched variables of a worker of ``config`` started with ``base``."""
    return {**base, **dict(config.env)}


def _full_machine(config: ProcessConfig) -> tuple[tuple[str, tuple[Any, ...]], ...]:
    """The machine of every target a worker of ``config`` imports under (import_scope)."""
    return tuple((name, config.machine if config.target == name else default.machine)
                 for name, default in sorted(default_configs().items()))


def same_deployment(old: ProcessConfig, new: ProcessConfig, base: dict[str, str | None],
                    read: set[str], only_kvreg: bool) -> bool:
    """Whether a worker of ``old`` (started with the watched variables ``base``) may serve
    ``new``: each variable in ``read`` (read by code outside kvreg) has the same value in
    both, and both model the same machines unless ``only_kvreg`` (no code outside kvreg
    has run in the worker, so nothing there can keep a machine fact)."""
    before, after = _effective(old, base), _effective(new, base)
    if any(before.get(key) != after.get(key) for key in read):
        return False
    return only_kvreg or _full_machine(old) == _full_machine(new)


def apply_config_env(config: ProcessConfig, base: dict[str, str | None]) -> None:
    """Give this process the watched variables of a worker of ``config`` started with
    ``base`` (a variable ``config`` does not set gets ``base``'s value back)."""
    for key, value in _effective(config, base).items():
        if value is None:
            os.environ.pop(key, None)
        elif os.environ.get(key) != value:
            os.environ[key] = value


@contextmanager
def watching_env() -> Iterator[list[EnvRead]]:
    """For the block (an import), note every read of a watched variable and by whom."""
    reads: list[EnvRead] = []
    watched_env()    # every target imported before a read can ask (no import inside a read)
    real = os.environ
    os.environ = _WatchedEnviron(real, reads)  # type: ignore[assignment]  # noqa: B003
    try:
        yield reads
    finally:
        os.environ = real  # noqa: B003 (the same object put back, nothing cleared)


_INSTALLED = tuple(p for p in {sysconfig.get_paths().get(k) for k in
                               ("stdlib", "platstdlib", "purelib", "platlib")} if p)


def installed(module: Any) -> bool:
    """Whether ``module`` belongs to the interpreter or an installed package (not to the
    code under test's own files): such modules are never imported a second time."""
    name = getattr(module, "__name__", "")
    path = getattr(module, "__file__", None)
    if name.startswith("kvreg.") or not isinstance(path, str) or not path.endswith(".py"):
        return True
    real = os.path.realpath(path)
    return any(real.startswith(os.path.realpath(p) + os.sep) for p in _INSTALLED)


def import_conflict(reads: list[EnvRead], config: ProcessConfig) -> str | None:
    """Why a scenario of ``config`` cannot run with what installed modules read at import."""
    env = dict(config.env)
    for key, module, seen in reads:
        loaded = sys.modules.get(module)     # gone: nothing of it can answer any more
        if key in env and env[key] != seen and loaded is not None and installed(loaded):
            return (f"{module} (an installed package) read {key}={seen!r} when it was "
                    f"imported, and this scenario sets {key}={env[key]!r}; kvreg imports "
                    "an installed package once per process, so it cannot give that module "
                    "this scenario's value (run the scenarios of one value together, with "
                    "the variable set before kvreg starts)")
    return None


@contextmanager
def _config_env(config: ProcessConfig) -> Iterator[None]:
    for key, value in config.env:
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    yield


_IMPORTING: list[bool] = []


@contextmanager
def import_scope(config: ProcessConfig | None = None) -> Iterator[None]:
    """Where the implementation is imported: every target's fakes patched in (``config``'s
    machine for its target, the defaults for the others), so what the code binds at import
    is a door (fakes/doors.py), and what it calls there is answered. What the import made
    through a door belongs to no scenario: it is reported when a scenario uses it."""
    from kvreg.fakes.doors import retire_scope

    if _IMPORTING:   # inside one already (a worker's, with its configuration): that one holds
        yield
        return
    with ExitStack() as stack:
        _IMPORTING.append(True)
        stack.callback(_IMPORTING.pop)
        stack.enter_context(retire_scope())
        # the machine an import sees when no configuration is chosen yet: each target's
        # default (Target.default_machine)
        for name, default in default_configs().items():
            chosen = config if config is not None and config.target == name else default
            target: Any = get_target(name)
            stack.enter_context(target.import_scope(chosen))
        yield


def prepare_worker(config: ProcessConfig, reload: Any) -> Any:
    """Set ``config``'s environment for good (this process serves that configuration only)
    and call ``reload()`` under a fake of its machine; returns what ``reload`` returns."""
    from kvreg.fakes.doors import PROCESS

    PROCESS.carry = True
    with _config_env(config), import_scope(config):
        return reload()
