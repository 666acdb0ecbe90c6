"""Scenario files: the format, its validation, and loading (format version 1, TOML).

A file describes one pool (type, parameters, memory kind) and a list of scenarios against
it; each scenario says its size, limits, device profile, fault plan, what is exercised and
what is expected, and which real failure it guards against. Every field is checked when
the file is loaded; an error names the file, the field and what was expected, and nothing
runs. The format is documented in scenarios/FORMAT.md.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from dataclasses import fields as dataclass_fields
from pathlib import Path
from typing import Any

from kvreg.harness.pools import (
    POOL_TYPES,
    GeometryError,
    PoolGeometry,
    accepted_params,
    make_geometry,
)
from kvreg.harness.run.targets import DEFAULT_TARGET
from kvreg.harness.scenario.fields import (
    EXERCISES,
    EXPECTATIONS,
    TORCH_BASE_OFFSET,
    Fields,
    GiB,
    Problems,
    check_unknown,
    resolve_fields,
)
from kvreg.harness.scenario.ids import catalog_folder, file_id
from kvreg.harness.scenario.size_limits import REAL_LIMIT, real_memory_problem, size_problem

__all__ = ["EXERCISES", "EXPECTATIONS", "FORMAT_VERSION", "TORCH_BASE_OFFSET", "Scenario",
           "ScenarioError", "bundled_root", "discover", "load_file", "load_paths"]

FORMAT_VERSION = 1
_TOP_KEYS = {"format", "pool", "host", "defaults", "scenario"}
_POOL_KEYS = {"type", "params", "memory", "base_offset", "shared"}


class ScenarioError(ValueError):
    """An invalid scenario file: the message names the file, the field and the expectation."""


@dataclass(frozen=True)
class Scenario:
    """One runnable scenario, fully resolved."""

    id: str
    file: Path
    name: str
    guards: str
    pool_type: str
    params: Mapping[str, Any]
    memory: str
    chunk_limit: int
    profile: str
    faults: tuple[Mapping[str, Any], ...]
    exercise: tuple[str, ...]
    expect: str
    empty: bool = False
    call_budget: int = 100_000
    tags: tuple[str, ...] = ()
    backends: tuple[str, ...] = ("fake", "cuda")
    # a name of the target registry (harness/run/targets.py)
    target: str = DEFAULT_TARGET
    # the target's own table (Target.options_table), as the target validated it
    options: Mapping[str, Any] = field(default_factory=dict)
    # "required": register must pin every byte; "optional": pinning nothing also passes
    pinning: str = "required"
    # [UNC] behaviours of the device profile switched for this scenario (profile.UNC_OPTIONS)
    profile_options: Mapping[str, Any] = field(default_factory=dict)
    # bytes each virtual buffer's base lies past a 2 MiB boundary ([pool] base_offset)
    base_offset: int = 0
    # SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB as the scenario sets it: () follows chunk_limit
    # (whole GiB, else unset); (value,) is that value, None for unset (chunk_gb = 0, "" or
    # "unset": docs/pools.md §1)
    chunk_var: tuple[str | None, ...] = ()
    # the contract the scenario judges and nothing else: "repeatable-teardown" (skipped for
    # code that does not declare it, harness/run/contract.py), or None
    contract: str | None = None
    # rank processes sharing one fake host (harness/ranks); 1: the single-process runner
    ranks: int = 1
    # the host the ranks share, as fakes/host HostLimits' keyword arguments ({} for one rank)
    host: Mapping[str, Any] = field(default_factory=dict)
    # [pool] shared: one region (a /dev/shm file on the host) mapped by every rank
    shared: bool = False

    def geometry(self) -> PoolGeometry:
        """The pool's geometry, built once per scenario (a geometry is never changed)."""
        built: PoolGeometry | None = self.__dict__.get("_geometry")
        if built is None:
            built = make_geometry(self.pool_type, **dict(self.params))
            object.__setattr__(self, "_geometry", built)
        return built

    @property
    def pool(self) -> str:
        layout = self.params.get("layout")
        return f"{self.pool_type}/{layout}" if layout else self.pool_type


_SCENARIO_ATTRIBUTES = frozenset(f.name for f in dataclass_fields(Scenario))


def _pages_for(pool_type: str, params: dict[str, Any], total: int) -> int:
    """The page count whose pool is closest to ``total`` bytes without exceeding it."""
    one = make_geometry(pool_type, **{**params, "page_num": 1}).total_nbytes
    two = make_geometry(pool_type, **{**params, "page_num": 2}).total_nbytes
    per_page = max(two - one, 1)
    return max(1, (total - (one - per_page)) // per_page)


def _resolve(problems: Problems, raw: Mapping[str, Any], pool: Mapping[str, Any],
             defaults: Mapping[str, Any], index: int, rel: str) -> Scenario | None:
    """One [[scenario]] table, every field validated (fields.py), then its pool sized."""
    problems.where = f"scenario[{index}]."
    if not isinstance(raw, Mapping):
        problems.fail("", "a table", raw)
        return None
    before = len(problems.errors)
    v = resolve_fields(Fields(problems, raw, defaults, pool, index))
    pool_type = pool.get("type")
    if len(problems.errors) > before or not isinstance(pool_type, str):
        return None
    params = v["params"]
    if not _sized(problems, pool_type, params, v["size"], v["memory"]):
        return None
    limit, chunk_var = v["chunk"]
    # every validator whose name is an attribute of Scenario fills it
    own = {name: value for name, value in v.items() if name in _SCENARIO_ATTRIBUTES}
    return Scenario(**{**own, "id": f"{rel}/{v['name']}", "file": problems.file,
                       "pool_type": pool_type, "params": params, "chunk_limit": limit,
                       "chunk_var": chunk_var})


def _sized(problems: Problems, pool_type: str, params: dict[str, Any],
           size: tuple[int | None, float | None], memory: str) -> bool:
    """Set the pool's page count from the scenario's size (in ``params``) and check that
    the geometry is possible and that this machine can hold it."""
    pages, total_gib = size
    try:
        if pages is not None and pool_type == "group":
            # a group has no page_num of its own: every member gets the page count
            params["members"] = [{**m, "page_num": pages} if isinstance(m, Mapping) else m
                                 for m in params.get("members", [])]
        elif pages is not None:
            params["page_num"] = pages
        elif total_gib is not None:
            params["page_num"] = _pages_for(pool_type, params, int(total_gib * GiB))
        elif "page_num" not in params and pool_type != "group":
            problems.fail("pages", "pages or total_gib (the pool's size)", None)
            return False
        geometry = make_geometry(pool_type, **params)
    except GeometryError as exc:
        problems.fail("pool", f"a possible geometry ({exc})", None)
        return False
    too_big = size_problem(geometry)
    if too_big is None and memory == "real":
        too_big = real_memory_problem(geometry, REAL_LIMIT)
    if too_big is not None:
        problems.fail("pool", f"a pool this machine can hold ({too_big})", None)
        return False
    return True


def load_file(path: Path, given: Path | None = None) -> list[Scenario]:
    """Load and validate one file; ScenarioError lists every problem found. Ids follow
    :mod:`.ids`; ``given`` is the folder the file was found under (only used where no
    project lies around the file)."""
    path = Path(path)
    problems = Problems(path)
    data = _read(path)
    check_unknown(problems, data, _TOP_KEYS, "top-level")
    if data.get("format") != FORMAT_VERSION:
        problems.fail("format", f"{FORMAT_VERSION} (the scenario format version)",
                      data.get("format"))
    pool = _pool(problems, data.get("pool"))
    defaults = data.get("defaults", {})
    if not isinstance(defaults, Mapping):
        problems.fail("defaults", "a table", defaults)
        defaults = {}
    if "host" in data:     # the file's [host]: the default of every scenario's host
        defaults = {"host": data["host"], **defaults}
    scenarios = data.get("scenario")
    if not isinstance(scenarios, list) or not scenarios:
        problems.fail("scenario", "at least one [[scenario]] table", None)
        scenarios = []
    if problems.errors:
        raise ScenarioError("\n".join(problems.errors))
    rel = file_id(path, given)
    out = []
    for i, raw in enumerate(scenarios):
        sc = _resolve(problems, raw, pool, defaults, i, rel)
        if sc is not None:
            out.append(sc)
    names = [s.name for s in out]
    for dup in sorted({n for n in names if names.count(n) > 1}):
        problems.where = ""
        problems.fail("scenario.name", "names unique within a file", dup)
    if problems.errors:
        raise ScenarioError("\n".join(problems.errors))
    return out


def _read(path: Path) -> dict[str, Any]:
    """The file's TOML; a file that is none is one ScenarioError."""
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{path}: not valid TOML: {exc}") from None
    except UnicodeDecodeError:
        raise ScenarioError(f"{path}: not UTF-8 text, so not a scenario file (TOML)") from None
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read: {exc.strerror}") from None


def _pool(problems: Problems, table: Any) -> Mapping[str, Any]:
    """The [pool] table: a known type, the parameters it accepts."""
    pool: Mapping[str, Any] = {}
    if isinstance(table, Mapping):
        pool = table
    else:
        problems.fail("pool", "a [pool] table", table)
    problems.where = "pool."
    check_unknown(problems, pool, _POOL_KEYS, "pool")
    if not isinstance(pool.get("type"), str) or pool["type"] not in POOL_TYPES:
        problems.fail("type", f"one of {sorted(POOL_TYPES)}", pool.get("type"))
    elif not isinstance(pool.get("params", {}), Mapping):
        problems.fail("params", "a table of pool parameters", pool.get("params"))
    else:
        accepted = accepted_params(str(pool["type"]))
        for key in pool.get("params", {}):
            if key not in accepted:
                problems.fail(f"params.{key}",
                              f"a parameter of {pool['type']} ({sorted(accepted)})", None)
    problems.where = ""
    return pool


def bundled_root() -> Path:
    """The folder of the scenario files shipped with kvreg."""
    return catalog_folder()


def discover(paths: Iterable[Path]) -> list[tuple[Path, Path]]:
    """(file, folder given) for every .toml under the given files or folders, sorted; a
    file reached twice (``kvreg run kv kv/mla``, or through a symlink) is loaded once, as
    pytest collects a file given twice once."""
    found: list[tuple[Path, Path]] = []
    seen: set[Path] = set()
    for p in paths:
        p = Path(p)
        if p.is_dir():
            files = sorted(p.rglob("*.toml"))
            if not files:
                raise ScenarioError(f"{p}: no scenario files (*.toml) under this folder")
            pairs = [(f, p) for f in files]
        elif p.exists():
            pairs = [(p, p.parent)]
        else:
            raise ScenarioError(f"{p}: no such file or folder")
        for f, given in pairs:
            if f.resolve() not in seen:
                seen.add(f.resolve())
                found.append((f, given))
    return found


def load_paths(paths: Iterable[Path] | None = None) -> list[Scenario]:
    """Every scenario under ``paths`` (the bundled catalog when None); all files validated."""
    targets = list(paths) if paths else [bundled_root()]
    problems: list[str] = []
    out: list[Scenario] = []
    for file, given in discover(targets):
        try:
            out += load_file(file, given)
        except ScenarioError as exc:
            problems.append(str(exc))
    if problems:
        raise ScenarioError("\n".join(problems))
    return out
