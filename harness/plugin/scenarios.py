"""Scenario files as pytest items: one item per scenario, its violations as the failure.

Registered by the ``kvreg`` plugin only when scenarios are configured (``kvreg_scenarios``
in the ini file or ``--kvreg-scenarios``), so a project that only uses the fixtures pays
nothing for it. Items are named by the scenario's id, the one ``kvreg run`` reports and
baselines record (:mod:`kvreg.harness.scenario.ids`: ``kv_scenarios/mla/pool/fail-middle-chunk``
from the project's rootdir, ``mla/page_first_direct/fail-middle-chunk`` in kvreg's catalog),
and work with ``-k``, ``-m`` and pytest-xdist. Every ``*.toml`` under the configured paths is a
scenario file, as for ``kvreg run``: one that does not validate is a collection error with
``kvreg run``'s message (file and field). Each scenario runs in a supervised worker process
(kvreg.harness.run.supervisor) under ``kvreg_timeout`` and ``kvreg_memory_limit``; a run that did
not complete fails its item with the one-line reason ``kvreg run`` reports.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kvreg.harness.run.baseline import (
    Baseline,
    BaselineError,
    failure_rules,
    load_baseline,
    renamed_note,
)
from kvreg.harness.run.causes import causes, hints, render_causes
from kvreg.harness.run.implementation import (
    Implementation,
    ImplementationError,
    make_implementation,
)
from kvreg.harness.run.limits import (
    DEFAULT_MEMORY,
    DEFAULT_TIMEOUT_S,
    Limits,
    parse_size,
    parse_timeout,
)
from kvreg.harness.run.result import INTERNAL_ERROR, ScenarioResult
from kvreg.harness.run.supervisor import Supervisor
from kvreg.harness.scenario.format import Scenario, ScenarioError, bundled_root, load_file

__all__ = ["KnownScenarioFailure", "KvregScenarioWarning", "ScenarioFile", "ScenarioItem",
           "ScenarioPlugin", "baseline_of", "scenario_paths"]

BUNDLED = "bundled"


class KvregScenarioWarning(UserWarning):
    """A scenario passed, but its report has a line to read (recovered, error-pending)."""


def _ini_folder(config: pytest.Config) -> Path:
    """Where relative ini values point from: the ini file's folder (else the rootdir)."""
    return Path(config.inipath).parent if config.inipath else Path(config.rootpath)


def baseline_of(config: pytest.Config) -> Baseline | None:
    """The baseline from --kvreg-baseline (relative to the invocation folder) or the
    ``kvreg_baseline`` ini value (relative to the ini file); UsageError when unreadable."""
    option = config.getoption("--kvreg-baseline")
    raw = option or config.getini("kvreg_baseline")
    if not raw:
        return None
    base = Path(config.invocation_params.dir) if option else _ini_folder(config)
    path = Path(raw) if Path(raw).is_absolute() else base / raw
    try:
        return load_baseline(path)
    except BaselineError as exc:
        raise pytest.UsageError(f"kvreg baseline: {exc}") from None


def scenario_paths(config: pytest.Config) -> list[Path]:
    """Folders/files from --kvreg-scenarios or the ini (``bundled`` = kvreg's catalog)."""
    raw = list(config.getoption("--kvreg-scenarios") or []) or \
        list(config.getini("kvreg_scenarios") or [])
    out = []
    for entry in raw:
        if entry == BUNDLED:
            out.append(bundled_root())
        else:
            p = Path(entry)
            out.append(p if p.is_absolute() else Path(config.rootpath) / p)
    return out


def scenario_limits(config: pytest.Config) -> Limits:
    """``--kvreg-timeout`` / ``kvreg_timeout`` and ``--kvreg-memory-limit`` /
    ``kvreg_memory_limit``; a bad value is a usage error naming the option."""
    timeout = config.getoption("--kvreg-timeout") or config.getini("kvreg_timeout")
    memory = config.getoption("--kvreg-memory-limit") or config.getini("kvreg_memory_limit")
    try:
        seconds = parse_timeout(str(timeout)) if timeout else DEFAULT_TIMEOUT_S
    except ValueError as exc:
        raise pytest.UsageError(f"kvreg_timeout: {exc}") from None
    try:
        size = parse_size(str(memory)) if memory else DEFAULT_MEMORY
    except ValueError as exc:
        raise pytest.UsageError(f"kvreg_memory_limit: {exc}") from None
    return Limits(seconds, size, timeout_option="kvreg_timeout",
                  memory_option="kvreg_memory_limit")


class ScenarioFailed(Exception):
    """Raised by an item whose scenario produced violations or did not complete."""

    def __init__(self, result: ScenarioResult) -> None:
        super().__init__(result.first_violation)
        self.result = result


class KnownScenarioFailure(ScenarioFailed):
    """A failure the baseline records: the item's strict xfail expects exactly this."""


class ScenarioPlugin:
    """Collects scenario files and runs their scenarios against the configured implementation."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.paths = [p.resolve() for p in scenario_paths(config)]
        self._impl: Implementation | None = None
        self.baseline = baseline_of(config)
        self.backend = str(config.getoption("--kvreg-backend") or
                           config.getini("kvreg_backend") or "fake")
        self.limits = scenario_limits(config)
        self._supervisor: Supervisor | None = None
        self.results: list[ScenarioResult] = []     # for the causes of the summary
        self.renamed: list[tuple[str, str]] = []    # (old id in the baseline, id)

    def implementation(self) -> Implementation:
        if self._impl is None:
            cfg = self.config
            # a SPEC from the command line is relative to where pytest was started; one
            # from the ini file, to the ini file's folder
            base = Path(cfg.invocation_params.dir) if cfg.getoption("--kvreg-impl") \
                else _ini_folder(cfg)
            # messages name the setting each value came from: the option or the ini key
            o_impl, o_teardown, o_style = (
                f"--kvreg-{n}" if cfg.getoption(f"--kvreg-{n}") else f"kvreg_{n}"
                for n in ("impl", "teardown", "style"))
            self._impl = make_implementation(
                cfg.getoption("--kvreg-impl") or cfg.getini("kvreg_impl") or None,
                cfg.getoption("--kvreg-teardown") or cfg.getini("kvreg_teardown") or None,
                cfg.getoption("--kvreg-style") or cfg.getini("kvreg_style") or None,
                base=base, options=(o_impl, o_teardown, o_style))
            pinning = cfg.getoption("--kvreg-pinning") or cfg.getini("kvreg_pinning") or None
            if pinning not in (None, "required", "optional"):
                raise ImplementationError(f"kvreg_pinning must be 'required' or 'optional', "
                                          f"got {pinning!r}")
            self._impl.pinning = pinning
        return self._impl

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """A SPEC that cannot load, or a function the style cannot call, is a usage error
        before any scenario runs (as ``kvreg run`` exits 2), not the same error per item."""
        try:
            self.implementation()
        except ImplementationError as exc:
            raise pytest.UsageError(f"kvreg: {exc}") from None

    def run(self, sc: Scenario) -> ScenarioResult:
        """One scenario in this session's supervised worker (started on first use)."""
        if self._supervisor is None:
            self._supervisor = Supervisor(self.implementation(), backend=self.backend,
                                          limits=self.limits)
        result = self._supervisor.run_one(sc)
        self.results.append(result)
        return result

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        """The root causes of the failing scenarios and the hints, as ``kvreg run`` prints
        them first (with pytest-xdist each worker holds its own results: none here)."""
        if self.renamed:
            terminalreporter.section("kvreg baseline")
            terminalreporter.write_line(renamed_note(self.renamed))
        impl = self._impl
        block = render_causes(causes(self.results))
        advice = hints(self.results, pinning=impl.pinning if impl else None,
                       style=impl.style if impl else "reference")
        if not block and not advice:
            return
        # a run with no failure can still have a hint (one per run, e.g. an undrainable error)
        terminalreporter.section("kvreg causes" if block else "kvreg hints")
        for line in block:
            terminalreporter.write_line(line)
        for note in advice:
            terminalreporter.write_line(f"hint: {note}")

    def pytest_unconfigure(self) -> None:
        if self._supervisor is not None:
            self._supervisor.close()
            self._supervisor = None

    def _wanted(self, path: Path) -> bool:
        """Every ``*.toml`` under a configured path, as ``kvreg run`` loads them."""
        if path.suffix != ".toml":
            return False
        resolved = path.resolve()
        return any(resolved == p or p in resolved.parents for p in self.paths)

    def pytest_collect_file(self, file_path: Path, parent: pytest.Collector
                            ) -> pytest.Collector | None:
        if self._wanted(file_path):
            root = next((p for p in self.paths
                         if p == file_path.resolve() or p in file_path.resolve().parents), None)
            item = ScenarioFile.from_parent(parent, path=file_path)
            item.scenario_root = root if root is None or root.is_dir() else root.parent
            return item
        return None

    def pytest_report_header(self, config: pytest.Config) -> str:
        try:
            label = self.implementation().label
        except ImplementationError as exc:
            label = f"invalid ({exc})"
        where = ", ".join(str(p) for p in self.paths)
        return f"kvreg scenarios: {where}; implementation: {label}; backend {self.backend}"


class ScenarioFile(pytest.File):
    """One scenario file; invalid files fail collection with the loader's message."""

    scenario_root: Path | None = None

    def collect(self) -> Iterator[pytest.Item]:
        try:
            scenarios = load_file(self.path, self.scenario_root)
        except ScenarioError as exc:
            raise InvalidScenarioFile(str(exc)) from None
        for sc in scenarios:
            yield ScenarioItem.from_parent(self, name=sc.id, scenario=sc)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException],
                     style: Any = None) -> str:
        if isinstance(excinfo.value, InvalidScenarioFile):
            return f"invalid kvreg scenario file:\n{excinfo.value}"
        return str(super().repr_failure(excinfo))


class InvalidScenarioFile(Exception):
    pass


class ScenarioItem(pytest.Item):
    """One scenario against the configured implementation."""

    def __init__(self, *, scenario: Scenario, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.scenario = scenario
        self.add_marker("kvreg_scenario")
        for word in (scenario.pool_type, scenario.target, *scenario.tags):
            self.keywords[word] = True
        plugin = self.config.pluginmanager.get_plugin("kvreg-scenarios")
        self.backend = plugin.backend if plugin is not None else "fake"
        if self.backend == "cuda":
            self.add_marker("kvreg_gpu")
        baseline = plugin.baseline if plugin is not None else None
        known = baseline.rules(scenario.id) if baseline is not None else frozenset()
        key = baseline.key(scenario.id) if baseline is not None else None
        if plugin is not None and key is not None and key != scenario.id:
            plugin.renamed.append((key, scenario.id))
        if known:
            self.add_marker(pytest.mark.xfail(
                strict=True, raises=KnownScenarioFailure,
                reason=f"known failure (kvreg baseline): {', '.join(sorted(known))}"))

    def runtest(self) -> None:
        plugin = self.config.pluginmanager.get_plugin("kvreg-scenarios")
        assert isinstance(plugin, ScenarioPlugin)
        if self.backend not in self.scenario.backends:
            pytest.skip(f"scenario runs on {', '.join(self.scenario.backends)} only "
                        f"(backend {self.backend})")
        result = plugin.run(self.scenario)
        if result.verdict == "skip":
            pytest.skip(result.reason)
        if plugin.baseline is not None and plugin.baseline.knows(result.id,
                                                                 failure_rules(result)):
            raise KnownScenarioFailure(result)
        if result.verdict in ("fail", "error", INTERNAL_ERROR):
            raise ScenarioFailed(result)
        for w in result.warnings:   # shown in pytest's warnings summary
            warnings.warn(KvregScenarioWarning(f"{result.id}: [{w.rule}] {w.message}"),
                          stacklevel=1)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException],
                     style: Any = None) -> str:
        if isinstance(excinfo.value, ScenarioFailed) and \
                excinfo.value.result.verdict == INTERNAL_ERROR:
            r = excinfo.value.result
            return f"scenario {r.id}: {r.reason}\n{r.tb}"
        if isinstance(excinfo.value, ScenarioFailed) and excinfo.value.result.verdict == "error":
            r = excinfo.value.result
            return (f"scenario {r.id} did not complete: {r.reason}\nit guards against: "
                    f"{r.guards}")
        if isinstance(excinfo.value, ScenarioFailed):
            r = excinfo.value.result
            lines = [f"scenario {r.id} failed ({len(r.violations)} violation(s)); it guards "
                     f"against: {r.guards}"]
            lines += [f"  {i}. [{v.rule}] {v.message}" for i, v in enumerate(r.violations, 1)]
            lines += [f"  warning [{w.rule}] {w.message}" for w in r.warnings]
            if self.config.getoption("verbose") > 0 and r.trace_text:
                lines += ["", "call trace:", r.trace_text]
            return "\n".join(lines)
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"kvreg scenario {self.scenario.id}"
