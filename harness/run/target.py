"""The seam between the runner core and a target (``cuda``, ``mooncake``, ...).

The core knows a target only through :class:`Target` and the :class:`World` it builds: what
the target accepts in a scenario's own options table, which exercise steps it offers, how it
builds its fake world and buffers, and how it judges what the run recorded. A new target is
one subpackage with an object of this shape, named in :mod:`.targets`.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .progress import Progress
from .result import Violation

if TYPE_CHECKING:
    from kvreg.harness.scenario.format import Scenario

    from .contract import StyleContract
    from .implementation import Implementation

__all__ = ["CannotRun", "ProcessConfig", "RankPlace", "SkipScenario", "Target", "World"]


class SkipScenario(Exception):
    """The scenario does not apply to this implementation or machine; the message says why."""


class CannotRun(Exception):
    """kvreg cannot build this scenario's world (a bad plan, geometry or deployment)."""


@dataclass(frozen=True)
class ProcessConfig:
    """What a scenario fixes for the whole process (harness/run/process.py): the target,
    the environment it sets (name, value or None for unset) and the machine it models."""

    target: str
    env: tuple[tuple[str, str | None], ...] = ()
    machine: tuple[Any, ...] = ()


@dataclass(frozen=True)
class RankPlace:
    """Where one rank of a many-rank scenario runs (harness/ranks): its rank, the world's
    size, its memory on the host the ranks share (fakes/host ``RankMemory``), the host's
    state file, and the /dev/shm file of a ``shared`` pool (None: one pool per rank). A
    target that runs such scenarios has ``build_rank(sc, impl, backend, place)``, which
    builds that rank's world as ``build`` does a single process's."""

    rank: int
    world_size: int
    memory: Any
    host_path: str
    shared: str | None = None


class World(Protocol):
    """One run's fake deployment, buffers and record, driven step by step by the core."""

    def isolation(self) -> AbstractContextManager[Any]:
        """Where the implementation's imports reach the fake (and the env it reads is set)."""

    def set_logs(self, logs: list[str]) -> None:
        """The list the core fills with what the implementation logs."""

    def watch(self, progress: Progress) -> None:
        """Report each register and teardown step, with its buffer's name, to ``progress``
        and let it count every call the trace records (``progress.watch(trace)``)."""

    def register(self, impl: Implementation) -> bool:
        """Register every buffer; stop at the first error. True when all were registered."""

    def fill(self) -> None:
        """The engine's first write of its whole pool (on a fake host: its pages fault)."""

    def transfer(self) -> None:
        """Move every page through the target's data path."""

    def begin_teardown(self) -> None:
        """Mark where teardown starts (also when the scenario asks for none)."""

    def teardown(self, impl: Implementation, round_: int, step: str) -> None:
        """One teardown step of the scenario (``round_`` counts from 0). The core runs the
        rounds after the first only for code that declares a repeatable teardown
        (:mod:`.contract`), or where the world has a true ``teardown_repeatable`` (optional:
        its teardown is the real API's own repeatable call)."""

    def budget_spent(self) -> None:
        """The call budget stopped the implementation: note where."""

    def finish(self) -> None:
        """Take the trace and what is still live; leave the fake or the driver clean."""

    def judge(self) -> list[Violation]:
        """The target's checks on what was recorded."""

    def warnings(self) -> list[Violation]:
        """What passes but the report should say (a recovered failure, a pending error)."""

    def calls(self) -> int:
        """How many calls were recorded."""

    def trace_text(self, limit: int) -> str:
        """The recorded calls, for a report."""

    def copy_coverage(self) -> dict[str, Any] | None:
        """How the copy step covered the pool's pages (pages copied, total, how the rest
        were proven), reported as the result's ``copy``; None where it did not run or the
        target has no copy step."""


class Target(Protocol):
    """What the runner core and scenario validation ask of a target."""

    name: str
    steps: tuple[str, ...]   # the exercise steps it offers
    # the environment variables it sets per scenario (ProcessConfig.env): a worker notes
    # which of them code outside kvreg reads (harness/run/process.py)
    watched_env: tuple[str, ...]
    # the machine (ProcessConfig.machine) its fakes model while code is imported before a
    # scenario has chosen one
    default_machine: tuple[Any, ...]
    # its name in messages ("a table of Mooncake options")
    title: str
    # the scenario key of the table of its own options (kept in Scenario.options and
    # checked by validate_options), or None where it reads none
    options_table: str | None
    # style -> how an implementation of that style calls (register, teardown) on it (the
    # styles it runs; implementation.StyleCall); its world calls the style and its own reference
    style_calls: Mapping[str, tuple[Any, Any]]
    # style -> how it declares its contract and how the report words it (the styles it
    # describes; contract.StyleContract)
    style_contracts: Mapping[str, StyleContract]
    # whether its buffers can start ``[pool] base_offset`` bytes into a page (the target
    # that places its buffers itself says no)
    takes_base_offset: bool

    def validate_options(self, options: Mapping[str, Any]) -> list[str]:
        """Problems with the scenario's table named after the target (empty when valid)."""

    def build(self, sc: Scenario, impl: Implementation, backend: Any) -> World:
        """The world of one run; raises SkipScenario or CannotRun."""

    def process_config(self, sc: Scenario) -> ProcessConfig:
        """What ``sc`` fixes for the process: workers serve one configuration each."""

    def import_scope(self, config: ProcessConfig) -> AbstractContextManager[Any]:
        """Fakes of ``config``'s machine patched in while a worker imports the code."""
